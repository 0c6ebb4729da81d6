"""Parallel delivery inside one dispatcher: a bounded pool, no transaction open while the
network is waited on, and the re-fetch once per listing through the marketplace's limiter."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection, transaction
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, Status
from tests.factories import DeviceFactory, ListingFactory, SubscribedDeviceFactory, WatchFactory
from tests.fakes.ichiba import APP_ID
from tests.fakes.push_service import b64url
from watches.marketplaces.ratelimit import RateLimiter, install_limiter


def _subscribed_rows(push_service, rows: int, listings: int = 3) -> list[Outbox]:
    """`rows` rows, each for its own subscribed device: one push per row (rows of one
    device would go out as one digest)."""
    shelf = ListingFactory.create_batch(listings, price=900)
    watches = []
    for i in range(rows):
        subscriber = push_service.new_subscriber()
        device = SubscribedDeviceFactory(
            push_endpoint=subscriber.endpoint,
            push_p256dh=subscriber.p256dh,
            push_auth=b64url(subscriber.auth),
        )
        watches.append(
            WatchFactory.create(device=device, listing=shelf[i % listings], target_price=950)
        )
    now = timezone.now()
    enqueue_many(Detection.for_watch(w, now, {"price": 900}) for w in watches)
    return list(Outbox.objects.order_by("id"))


@pytest.mark.django_db(transaction=True)
def test_deliveries_run_in_parallel_but_never_beyond_the_pool(push_service, settings):
    settings.OUTBOX_DELIVERY_WORKERS = 3
    push_service.delay = 0.05
    _subscribed_rows(push_service, 12)

    result = run_cycle()

    assert result.by_status[Status.SENT] == 12
    assert push_service.max_in_flight == 3


@pytest.mark.django_db(transaction=True)
def test_one_worker_delivers_one_at_a_time(push_service, settings):
    settings.OUTBOX_DELIVERY_WORKERS = 1
    push_service.delay = 0.02
    _subscribed_rows(push_service, 4)

    assert run_cycle().by_status[Status.SENT] == 4
    assert push_service.max_in_flight == 1


@pytest.mark.django_db(transaction=True)
def test_no_transaction_is_open_while_a_delivery_waits_on_the_network(push_service, settings):
    """While the push service holds a request, another writer can lock the very row being
    delivered at once: the dispatcher's claim was committed before the network call, and its
    outcome is written after it, in a new short transaction."""
    rows = _subscribed_rows(push_service, 1)
    db = settings.DATABASES["default"]
    seen: list[str] = []

    def write_the_row_meanwhile() -> None:
        if connection.vendor == "sqlite":
            raw = sqlite3.connect(db["NAME"], timeout=0)
            try:
                raw.execute("BEGIN IMMEDIATE")  # fails at once if anyone holds the write lock
                raw.execute("ROLLBACK")
                seen.append("unlocked")
            finally:
                raw.close()
        else:
            try:
                with transaction.atomic():
                    Outbox.objects.select_for_update(nowait=True).filter(pk=rows[0].pk).get()
                    seen.append("unlocked")
            finally:
                connection.close()  # the fake service's thread

    push_service.answer(201, before=write_the_row_meanwhile)

    assert run_cycle().by_status[Status.SENT] == 1
    assert seen == ["unlocked"]


@pytest.mark.django_db
def test_rakuten_refetch_goes_through_the_limiter_once_per_listing(
    ichiba, recording_channel, settings
):
    slots: list[float] = []
    clock = [0.0]
    limiter = RateLimiter(
        settings.RAKUTEN_RATE_PER_SECOND, clock=lambda: clock[0], sleep=slots.append
    )
    install_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND, limiter)
    codes = [f"shop{i}:item-{i}" for i in range(3)]  # a shop each: asked item by item
    device = DeviceFactory()
    now = timezone.now()
    detections = []
    for code in codes:
        ichiba.add(code, price=900)
        listing = ListingFactory(source="rakuten", item_code=code, price=900, units_per_pack=None)
        for _ in range(4):
            watch = WatchFactory(listing=listing, device=device, target_price=1000)
            detections.append(Detection.for_watch(watch, now, {"line": "1000", "price": 900}))
    enqueue_many(detections)

    result = run_cycle()

    assert result.by_status[Status.SENT] == 12
    assert sorted(q["itemCode"] for q in ichiba.requests) == codes  # once per listing
    # Three requests through the limiter: the first goes at once, each later one waits its
    # slot (the fake clock stands still, so the waits are whole intervals).
    assert slots == [limiter.interval, 2 * limiter.interval]
    assert Outbox.objects.filter(status=Status.SENT).count() == 12
