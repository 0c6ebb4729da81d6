"""The outside world failing at random — the marketplace (a fake Rakuten Ichiba) and the push
service each fail ~30 % of requests with 429 + Retry-After, 500, stalls past the timeout,
connection resets and malformed answers. After enough cycles (time moved forward between
them) every row is `sent`, `dropped` or `failed`; none is lost; and a row is `failed` only
where it really used up every retry."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest
import time_machine
from django.db.models import Count, Q
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import TERMINAL, Outbox, OutboxEvent, Reason, Status
from tests.fakes.ichiba import APP_ID
from tests.reliability.world import not_terminal, statuses, subscribed_devices
from watches.marketplaces.ratelimit import shared_limiter
from watches.models import Channel, Listing, Trigger, Watch

FAULT_RATE = 0.3
TRANSIENT = {
    Reason.REFETCH_RATE_LIMITED,
    Reason.REFETCH_NETWORK,
    Reason.REFETCH_SERVER,
    Reason.REFETCH_BAD_RESPONSE,
    Reason.DELIVER_RATE_LIMITED,
    Reason.DELIVER_NETWORK,
    Reason.DELIVER_SERVER,
}


@pytest.mark.django_db
def test_random_faults_of_marketplace_and_push_service_lose_nothing(
    ichiba, push_service, full, figures, settings
):
    size, listing_count = (1000, 40) if full else (150, 10)
    seed = int(os.environ.get("RELIABILITY_SEED", "30"))
    # Timeouts short enough for a test, stalls well past them. After a 429 (Retry-After 1 s)
    # the adapter waits its turn, as it would in production, instead of skipping the batch.
    settings.WEBPUSH_READ_TIMEOUT = 0.5
    settings.RAKUTEN_READ_TIMEOUT = 0.5
    settings.RAKUTEN_MAX_WAIT_SECONDS = 2.0
    ichiba.stall_seconds = 1.5
    # A low cap, so that some rows really use up every retry and the cap is put to the test
    # (a row succeeds ~half the time per cycle here: 0.7 × 0.7).
    settings.OUTBOX_MAX_RETRY = 3
    rows = _rakuten_rows(ichiba, push_service, size, listing_count)
    ichiba.fail_at_random(FAULT_RATE, seed, retry_after="1")
    push_service.fail_at_random(FAULT_RATE, seed + 1, stall_seconds=1.5)
    limiter = shared_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND)

    cycles = 0
    with time_machine.travel(timezone.now(), tick=True) as clock:
        while not_terminal(rows) and cycles < 40:
            run_cycle()
            cycles += 1
            # The next cycle comes when everything due is due: the backoff is capped at
            # 30 min and a Retry-After here at 2 min. The marketplace's hold-off (real time)
            # has passed too, as it would have a minute later.
            clock.shift(dt.timedelta(minutes=31))
            time.sleep(limiter.wait_needed())

    outcome = statuses(rows)
    # Rows told by an accepted push (a digest tells several), by their dedup key.
    accepted = push_service.deliveries_by_tag()
    sent_tags = list(
        Outbox.objects.filter(id__in=rows, status=Status.SENT).values_list(
            "sent_message__tag", flat=True
        )
    )
    lost = not_terminal(rows) + sum(1 for tag in sent_tags if not accepted[tag])
    failed_rows = list(Outbox.objects.filter(id__in=rows, status=Status.FAILED))
    figures(
        "faults",
        rows=size,
        cycles=cycles,
        sent=outcome[Status.SENT],
        dropped=outcome[Status.DROPPED],
        failed=outcome[Status.FAILED],
        pushes=len(push_service.accepted()),
        deliveries=sum(accepted.values()),
        duplicates=sum(n - 1 for n in accepted.values() if n > 1),
        lost=lost,
        terminal=f"{sum(outcome[s] for s in TERMINAL)}/{size}",
        marketplace_faults=dict(ichiba.faults),
        push_faults=dict(push_service.faults),
    )
    assert not_terminal(rows) == 0, outcome
    assert lost == 0
    assert ichiba.faults and push_service.faults
    # Every sent row was taken on by the push service; no other row was (a fault never
    # answers 2xx).
    assert set(accepted) <= set(sent_tags)
    # `failed` only at the cap: every retry used, each for a transient reason.
    for row in failed_rows:
        retries = OutboxEvent.objects.filter(outbox=row, to_status=Status.RETRY)
        assert row.retry_count == settings.OUTBOX_MAX_RETRY, row.pk
        assert retries.count() == settings.OUTBOX_MAX_RETRY, row.pk
        assert row.reason in TRANSIENT, (row.pk, row.reason)
    # …and every other row that hit a transient failure got its retries.
    under_cap = Outbox.objects.filter(id__in=rows).exclude(status=Status.FAILED)
    assert not under_cap.filter(retry_count__gt=settings.OUTBOX_MAX_RETRY).exists()
    stories = (
        OutboxEvent.objects.filter(outbox_id__in=rows)
        .values("outbox_id")
        .annotate(sent=Count("id", filter=Q(to_status=Status.SENT)))
    )
    assert all(s["sent"] <= 1 for s in stories)


def _rakuten_rows(ichiba, push_service, size: int, listing_count: int) -> list[int]:
    codes = [f"fault-shop:item-{i}" for i in range(listing_count)]
    for code in codes:
        ichiba.add(code, price=900)
    listings = Listing.objects.bulk_create(
        Listing(source="rakuten", item_code=code, name=code, price=900) for code in codes
    )
    devices = subscribed_devices(push_service, 20)
    watches = Watch.objects.bulk_create(
        Watch(
            device=devices[i % len(devices)],
            listing=listings[i % len(listings)],
            trigger=Trigger.TARGET_PRICE,
            target_price=950,
        )
        for i in range(size)
    )
    now = timezone.now()
    detections = [
        Detection(w.pk, w.device_id, Channel.WEBPUSH, Trigger.TARGET_PRICE, now, {"price": 900})
        for w in watches
    ]
    assert enqueue_many(detections) == size
    return list(Outbox.objects.filter(watch__in=watches).values_list("id", flat=True))
