"""One day of a target-price watch on the demo market, through the real commands: detection,
the day's fold, a drop because the price went back up, and a later send from the fresh price."""

from __future__ import annotations

import datetime as dt
import io
import json
import zoneinfo
from decimal import Decimal

import pytest
from django.core.management import call_command

from demo.market import set_product
from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
MORNING = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)


def run(command: str, *args: str) -> dict:
    out = io.StringIO()
    call_command(command, *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_a_target_price_watch_through_one_day(time_machine, recording_channel):
    def at(hour: int, minute: int = 0) -> dt.datetime:
        moment = MORNING.replace(hour=hour, minute=minute)
        time_machine.move_to(moment, tick=False)
        return moment

    at(9)
    listing = ListingFactory(price=1000, shipping=0, name="スコッティ 12ロール", units_per_pack=12)
    watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=900)

    # 10:00 the price drops below the target: one row.
    at(10)
    set_product(listing.item_code, price=850)
    assert run("poll_prices")["enqueued"] == 1
    first = Outbox.objects.get()
    assert first.status == Status.PENDING and first.detected_payload["price"] == 850

    # 10:15 still below: the same day folds into that row.
    at(10, 15)
    assert run("poll_prices") == {
        "products": 0,
        "listings": 1,
        "observations": 1,
        "errors": 0,
        "enqueued": 0,
    }
    assert Outbox.objects.count() == 1

    # 10:20 the price goes back up before the dispatcher gets to it: dropped, nothing sent.
    at(10, 20)
    set_product(listing.item_code, price=950)
    assert run("dispatch_outbox")["dropped"] == 1
    first.refresh_from_db()
    assert (first.status, first.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert recording_channel.delivered == []
    watch.refresh_from_db()
    assert (watch.last_notified_price, watch.last_notified_at) == (None, None)

    # 10:30 above the target: nothing new.
    at(10, 30)
    assert run("poll_prices")["enqueued"] == 0

    # 15:00 it drops again: the dropped row does not hold the day, so a new row is enqueued.
    at(15)
    set_product(listing.item_code, price=880)
    assert run("poll_prices")["enqueued"] == 1
    second = Outbox.objects.exclude(pk=first.pk).get()
    assert second.detected_payload["price"] == 880

    # 15:01 a little lower by the time it is sent: the message carries the fresh price.
    sent_at = at(15, 1)
    set_product(listing.item_code, price=870)
    assert run("dispatch_outbox")["sent"] == 1
    second.refresh_from_db()
    assert (second.status, second.reason) == (Status.SENT, Reason.DELIVERED)
    ((row_id, message),) = recording_channel.delivered
    assert row_id == second.pk
    assert message.price == 870 and "¥870" in message.body and "¥880" not in message.body
    watch.refresh_from_db()
    assert watch.last_notified_price == Decimal(870)
    assert watch.last_notified_at == sent_at

    # 15:15 still ¥870: already told, nothing enqueued (and the sent row holds the day).
    at(15, 15)
    assert run("poll_prices")["enqueued"] == 0
    assert Outbox.objects.count() == 2
