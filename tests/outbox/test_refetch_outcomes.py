"""Every marketplace adapter, against its fake on 127.0.0.1: the dispatcher maps each answer
the re-fetch of a watched listing can get to the same outcome and reason, whichever
marketplace gave it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.enqueue import enqueue
from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from watches.models import Listing, PricePoint

# (fixture of the fake, source, an item code, the fake's name for a 503)
MARKETPLACES = [
    pytest.param("ichiba", "rakuten", "yasu-shop:tp-12r", "unavailable", id="rakuten"),
    pytest.param("yahoo", "yahoo", "yasu-store_tp-12r", "maintenance", id="yahoo"),
]

# (fake behaviour, the row's status, its reason); a 503 is added per marketplace.
REFETCH_OUTCOMES = [
    ("rate_limited", Status.RETRY, Reason.REFETCH_RATE_LIMITED),
    ("server", Status.RETRY, Reason.REFETCH_SERVER),
    ("stall", Status.RETRY, Reason.REFETCH_NETWORK),
    ("malformed", Status.RETRY, Reason.REFETCH_BAD_RESPONSE),
    ("missing_fields", Status.RETRY, Reason.REFETCH_BAD_RESPONSE),
    ("wrong_types", Status.RETRY, Reason.REFETCH_BAD_RESPONSE),
    ("empty", Status.DROPPED, Reason.OUT_OF_STOCK),
    ("not_found", Status.DROPPED, Reason.ITEM_NOT_FOUND),
    ("unavailable", Status.RETRY, Reason.REFETCH_SERVER),
]


def pending_row(request, fixture: str, source: str, code: str):
    """The marketplace's fake, with a listing of it at ¥900 and a watch for ¥1000 or less
    whose row is pending."""
    fake = request.getfixturevalue(fixture)
    fake.add(code, price=900)
    listing = ListingFactory(source=source, item_code=code, price=900, units_per_pack=None)
    watch = WatchFactory.create(listing=listing, device=DeviceFactory(), target_price=1000)
    assert enqueue(watch, timezone.now(), {"line": "1000", "price": 900})
    return fake, Outbox.objects.get(watch=watch)


@pytest.mark.django_db
@pytest.mark.parametrize(("fixture", "source", "code", "unavailable"), MARKETPLACES)
@pytest.mark.parametrize(("behaviour", "status", "reason"), REFETCH_OUTCOMES)
def test_the_dispatcher_maps_each_fetch_outcome(
    request, recording_channel, fixture, source, code, unavailable, behaviour, status, reason
):
    fake, row = pending_row(request, fixture, source, code)
    fake.behave[code] = unavailable if behaviour == "unavailable" else behaviour
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (status, reason)
    assert recording_channel.delivered == []
    event = row.events.order_by("-id").first()
    assert (event.to_status, event.reason) == (status, reason)


@pytest.mark.django_db
@pytest.mark.parametrize(("fixture", "source", "code", "unavailable"), MARKETPLACES)
def test_the_dispatcher_honours_retry_after_from_a_429(
    request, recording_channel, fixture, source, code, unavailable
):
    fake, row = pending_row(request, fixture, source, code)
    fake.behave[code] = "rate_limited"
    fake.retry_after = "600"
    now = timezone.now()
    run_cycle(now=now)
    row.refresh_from_db()
    assert row.next_attempt_at == now + dt.timedelta(seconds=600)


@pytest.mark.django_db
@pytest.mark.parametrize(("fixture", "source", "code", "unavailable"), MARKETPLACES)
def test_the_dispatcher_sends_from_the_fresh_price(
    request, recording_channel, fixture, source, code, unavailable
):
    fake, row = pending_row(request, fixture, source, code)
    fake.add(code, price=880)
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED)
    ((row_id, message),) = recording_channel.delivered
    assert row_id == row.pk and message.price == 880 and "¥880" in message.body
    listing = Listing.objects.get(source=source, item_code=code)
    assert listing.price == 880
    assert PricePoint.objects.filter(listing=listing, price=880).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fixture", "source", "code", "refusal"),
    [
        pytest.param("ichiba", "rakuten", "yasu-shop:tp-12r", "unauthorized", id="rakuten"),
        pytest.param("yahoo", "yahoo", "yasu-store_tp-12r", "bad_appid", id="yahoo"),
    ],
)
def test_a_configuration_fault_holds_the_row_until_the_marketplace_is_probed(
    request, recording_channel, settings, fixture, source, code, refusal
):
    """`config` halts the marketplace: the row waits `marketplace_halted`, no retry counted,
    due again when the next probe may go out; the event keeps the kind and what to fix."""
    settings.MARKETPLACE_PROBE_SECONDS = 300
    fake, row = pending_row(request, fixture, source, code)
    fake.behave[code] = refusal
    now = timezone.now()
    run_cycle(now=now)
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    assert row.retry_count == 0
    assert row.next_attempt_at == now + dt.timedelta(seconds=300)
    assert "_APP_ID" in row.detail  # the setting to check
    event = row.events.order_by("-id").first()
    assert event.data["fetch_error"] == "config"
    assert "_APP_ID" in event.data["detail"]
