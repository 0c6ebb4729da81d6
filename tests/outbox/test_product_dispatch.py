"""The dispatcher re-checks a product watch on the product's best offer now (issue 16):
end to end against the fake Yahoo! Shopping on 127.0.0.1, the decrypting push service and
the SMTP server — one request per product per cycle, the message naming the shop that is
cheapest at send time."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

from outbox.dispatch import run_cycle
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import DeviceFactory, EmailDeviceFactory
from tests.fakes.push_service import subscribe
from tests.fakes.smtp_server import text_and_html
from tests.watches.test_products import JAN, START, poll_at, watch
from watches.models import Listing, PricePoint, Trigger

pytestmark = pytest.mark.django_db


def dispatch_at(minutes: int):
    with time_machine.travel(START + dt.timedelta(minutes=minutes), tick=False):
        return run_cycle()


def offer(code: str) -> Listing:
    return Listing.objects.get(source="yahoo", item_code=code)


def test_a_shop_gone_back_up_is_replaced_by_the_cheapest_shop_still_under_the_target(
    product, yahoo, client, push_service
):
    subscriber = push_service.new_subscriber()
    made = watch(product, device=subscribe(client, subscriber), target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    detected = Outbox.objects.get(watch=made).detected_payload
    assert (detected["item_code"], detected["price"]) == ("store3_tp-12r", 480)
    # Before dispatch the detected shop goes back up, and another shop comes down to ¥495.
    yahoo.set("store3_tp-12r", price=600)
    yahoo.set("store4_tp-12r", price=495)
    yahoo.requests.clear()

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.SENT, (row.reason, row.detail)
    [received] = push_service.received
    assert received.decrypt_error is None
    message = received.payload
    assert message["price"] == 495
    assert "ストア store4" in message["body"] and "¥495" in message["body"]
    assert "free shipping" in message["body"]
    assert "store3" not in message["body"] and "¥480" not in message["body"]
    assert message["url"] == f"/listings/{offer('store4_tp-12r').pk}/"
    # One request for the whole product: by JAN, never for the detected listing.
    assert [query.get("jan_code") for query in yahoo.requests] == [JAN]
    # The answer was kept like any re-fetch: each shop's last-seen state and a history point.
    assert offer("store3_tp-12r").price == 600 and offer("store4_tp-12r").price == 495
    assert PricePoint.objects.filter(listing=offer("store4_tp-12r"), price=495).exists()


def test_no_shop_at_or_below_the_target_any_more_drops_condition_lost(
    product, yahoo, client, push_service
):
    made = watch(product, device=subscribe(client, push_service.new_subscriber()), target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    yahoo.set("store3_tp-12r", price=600)  # the others stay at 505 and above
    yahoo.requests.clear()

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert push_service.received == []
    assert yahoo.asked_for_jan(JAN) == 1 and len(yahoo.requests) == 1


def test_no_shop_in_stock_drops_out_of_stock(product, yahoo, recording_channel):
    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    for number in range(1, 6):
        yahoo.set(f"store{number}_tp-12r", inStock=False)

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.OUT_OF_STOCK)
    assert recording_channel.delivered == []


def test_many_rows_of_one_product_cost_one_request_per_cycle(product, yahoo, recording_channel):
    watches = [watch(product, device=DeviceFactory(), target_price=500) for _ in range(4)]
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 4
    yahoo.requests.clear()

    dispatch_at(21)

    assert set(Outbox.objects.filter(watch__in=watches).values_list("status", flat=True)) == {
        Status.SENT
    }
    assert len(recording_channel.delivered) == 4
    assert yahoo.asked_for_jan(JAN) == 1 and len(yahoo.requests) == 1


def test_a_marketplace_that_cannot_answer_retries_the_row(product, yahoo, recording_channel):
    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    yahoo.behave[JAN] = "server"

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.RETRY, Reason.REFETCH_SERVER)
    assert recording_channel.delivered == []


def test_the_mail_names_the_shop_its_price_and_shipping_and_links_to_it(
    product, yahoo, smtp_server
):
    made = watch(product, device=EmailDeviceFactory(), target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    yahoo.set("store3_tp-12r", price=600)
    yahoo.set("store4_tp-12r", price=495)

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.SENT, (row.reason, row.detail)
    [mail] = smtp_server.messages()
    text, html = text_and_html(mail)
    for part in (text, html):
        assert "ストア store4" in part and "¥495" in part and "free shipping" in part
        assert "https://store.shopping.yahoo.co.jp/store4/tp-12r.html" in part
    sent = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT)
    assert sent.data["message"]["listing"] == offer("store4_tp-12r").pk


def test_the_message_names_shop_and_shipping_in_japanese_too(product, yahoo, recording_channel):
    made = watch(product, device=DeviceFactory(language="ja"), target_price=500)
    yahoo.set("store3_tp-12r", price=480, shipping={"code": 1, "name": "設定なし"})
    assert poll_at(20).enqueued == 1

    dispatch_at(21)

    assert Outbox.objects.get(watch=made).status == Status.SENT
    ((_, message),) = recording_channel.delivered
    assert "ストア store3: ¥480、送料不明。" in message.body
    assert message.data["shop_url"] == "https://store.shopping.yahoo.co.jp/store3/tp-12r.html"


def test_a_price_drop_message_names_the_typical_price_it_fell_below(
    product, yahoo, recording_channel
):
    """The product's detection keeps its typical price and 90-day low, as a listing's does:
    the message names the price the drop is measured against."""
    for minutes in range(30, 60 * 24 * 3, 60 * 6):  # three days at ¥505 cheapest
        poll_at(minutes)
    made = watch(product, trigger=Trigger.PRICE_DROP, drop_percent=10)
    yahoo.set("store5_tp-12r", price=450)  # 10.9 % below the typical ¥505
    assert poll_at(60 * 24 * 3 + 30).enqueued == 1
    detected = Outbox.objects.get(watch=made).detected_payload
    assert (detected["typical"], detected["low_90"]) == ("505", 505)

    dispatch_at(60 * 24 * 3 + 31)

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.SENT, (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert "¥450" in message.body and "¥505" in message.body, message.body
    assert "usual —" not in message.body


def test_a_page_the_poll_read_within_the_bound_is_the_rechecks_answer(
    product, yahoo, recording_channel, settings
):
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    yahoo.requests.clear()

    with time_machine.travel(START + dt.timedelta(minutes=20, seconds=10), tick=False):
        run_cycle()

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.SENT, (row.reason, row.detail)
    assert yahoo.requests == [], "the poll's answer, 10 s old: nothing asked"
    assert recording_channel.delivered[0][1].price == 480
    delivered = OutboxEvent.objects.get(outbox=row, reason=Reason.DELIVERED)
    assert delivered.data["fresh_age_seconds"] == 10.0
