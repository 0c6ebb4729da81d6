"""A healthy but slow push service — every answer correct, each in 2 s, far under the read
timeout — costs no row a counted retry: a batch's deliveries go out in steps the service
keeps up with, and each row is judged on a value re-checked right before its delivery is
handed over, so none is sent from a value older than OUTBOX_REFETCH_MAX_AGE and none is
retried for another row's slowness (`outbox.pacing`)."""

from __future__ import annotations

from collections import Counter

import pytest

from outbox.dispatch import run_cycle
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.reliability.world import demo_listings, due_rows, statuses, subscribed_devices
from watches import services


@pytest.mark.django_db
def test_a_slow_healthy_push_service_costs_no_counted_retry(
    push_service, full, figures, settings, monkeypatch
):
    # Full: the sweep that found it (400 rows, two to a device: 200 digests through 8
    # workers, 4 a second against a 30 s bound). Small: the same ratio of the service's pace
    # to the bound, in a fraction of the time — one row a second against 6 s.
    bound, workers, rows_n, devices_n = (30, 8, 400, 200) if full else (6, 2, 14, 14)
    settings.OUTBOX_REFETCH_MAX_AGE = bound
    settings.OUTBOX_DELIVERY_WORKERS = workers
    push_service.delay = 2.0
    rows = due_rows(subscribed_devices(push_service, devices_n), demo_listings(10), rows_n)
    fetch, asked = services.fetch, Counter()

    def counted(source, codes):
        asked.update(codes)
        return fetch(source, codes)

    monkeypatch.setattr(services, "fetch", counted)

    cycles = 0
    while Outbox.objects.filter(id__in=rows, status__in=["pending", "retry"]).exists():
        run_cycle()
        cycles += 1
        if cycles == 3:
            break

    retries = OutboxEvent.objects.filter(outbox_id__in=rows, to_status=Status.RETRY)
    delivered = OutboxEvent.objects.filter(outbox_id__in=rows, reason=Reason.DELIVERED)
    ages = [event.data["fresh_age_seconds"] for event in delivered]
    counted_retries = sum(Outbox.objects.filter(id__in=rows).values_list("retry_count", flat=True))
    figures(
        "slow-channel",
        rows=rows_n,
        pushes=len(push_service.accepted()),
        cycles=cycles,
        counted_retries=counted_retries,
        retry_events=retries.count(),
        failed=statuses(rows)[Status.FAILED],
        oldest_value_told=max(ages, default=0),
        bound=bound,
        marketplace_requests=sum(asked.values()),
    )
    assert counted_retries == 0
    assert list(retries.values_list("reason", "detail")) == []
    assert statuses(rows) == Counter({Status.SENT: rows_n})
    assert len(ages) == rows_n
    assert max(ages) <= bound, "every notification told a value re-checked within the bound"
    assert sorted(push_service.deliveries_by_tag().values()) == [1] * rows_n
