"""Two dispatchers at once over the same due rows deliver each row exactly once (SQLite file
database with BEGIN IMMEDIATE; PostgreSQL with FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory

ROWS = 500


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_deliver_each_of_500_rows_exactly_once(recording_channel, settings):
    settings.OUTBOX_BATCH_SIZE = 25  # many small claims, so the two really interleave
    listings = ListingFactory.create_batch(10, price=900)
    device = DeviceFactory()
    watches = [
        WatchFactory(listing=listings[i % 10], device=device, target_price=950) for i in range(ROWS)
    ]
    from django.utils import timezone

    now = timezone.now()
    assert enqueue_many(Detection.for_watch(w, now, {"price": 900}) for w in watches) == ROWS

    start = threading.Barrier(2)
    errors: list[BaseException] = []
    results = []

    def dispatcher() -> None:
        try:
            start.wait()
            while True:
                result = run_cycle()
                results.append(result)
                if result.claimed == 0:
                    break
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=dispatcher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    deliveries = Counter(row_id for row_id, _ in recording_channel.delivered)
    assert len(deliveries) == ROWS
    assert set(deliveries.values()) == {1}, "a row was delivered twice"
    assert Outbox.objects.filter(status=Status.SENT).count() == ROWS
    assert sum(r.by_status[Status.SENT] for r in results) == ROWS
    # both dispatchers really took part
    holders = {e for e in Outbox.objects.values_list("events__actor", flat=True) if e}
    assert len(holders) >= 2
