"""Dispatcher processes over the same backlogs on PostgreSQL: their claims, `superseded`
drops, lease beats and recordings lock overlapping rows at the same moments, and the
database breaks any deadlock among them by failing one statement. No cycle may end on it:
every `DispatchRun` ends without an error, every watch is told once (its newest detection),
nothing is told twice and nothing is lost — round after round."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from outbox.enqueue import Detection, enqueue_many
from outbox.messages import dedup_key
from outbox.models import DispatchRun, Outbox, Reason, Status
from tests.reliability.world import (
    child_env,
    demo_listings,
    log_tail,
    start_dispatcher,
    stop,
    subscribed_devices,
    wait_for,
)
from watches.models import Channel, Trigger, Watch

# Six processes taking batches of five from eight watches' backlogs of 30 days each: every
# batch holds rows of a watch whose other rows the others are claiming or dropping at the
# same moment (the least work that still met a deadlock in a cycle's step before each step
# was run again on one: docs/decisions/deadlocks.md).
PROCESSES = 6
WATCHES, DAYS, DEVICES, BATCH = 8, 30, 2, 5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_dispatchers_over_overlapping_backlogs_end_every_cycle_without_an_error(
    push_service, full, figures, tmp_path
):
    rounds = 20 if full else 2
    push_service.delay = 0.05
    devices = subscribed_devices(push_service, DEVICES)
    listings = demo_listings(DEVICES * 2)
    env = child_env(OUTBOX_BATCH_SIZE=BATCH)
    totals: Counter[str] = Counter()
    errors: list[str] = []
    deadlocks_before = _deadlocks()
    for run in range(rounds):
        watches = _backlog(devices, listings)
        before = set(DispatchRun.objects.values_list("id", flat=True))
        go = tmp_path / f"go-{run}"
        ready = [tmp_path / f"ready-{run}-{n}" for n in range(PROCESSES)]
        procs = [
            start_dispatcher(env, tmp_path, f"d{run}-{n}", ready=ready[n], go=go)
            for n in range(PROCESSES)
        ]
        try:
            wait_for(ready, procs, timeout=60)
            go.touch()
            for proc in procs:
                proc.wait(timeout=300)
        finally:
            for proc in procs:
                stop(proc)
        logs = "\n".join(log_tail(tmp_path, f"d{run}-{n}") for n in range(PROCESSES))
        assert all(proc.returncode == 0 for proc in procs), logs

        runs = DispatchRun.objects.exclude(id__in=before)
        failed = [error for error in runs.values_list("error", flat=True) if error]
        errors += failed
        rows = list(Outbox.objects.filter(watch__in=watches).order_by("watch_id", "detected_at"))
        outcomes = Counter((row.status, row.reason) for row in rows)
        newest = {dedup_key(row) for row in {row.watch_id: row for row in rows}.values()}
        keys = {dedup_key(row) for row in rows}
        told = {key: n for key, n in push_service.deliveries_by_tag().items() if key in keys}
        totals.update(
            rows=len(rows),
            cycles=runs.count(),
            failed_cycles=len(failed),
            sent=outcomes[(Status.SENT, Reason.DELIVERED)],
            superseded=outcomes[(Status.DROPPED, Reason.SUPERSEDED)],
            told=sum(told.values()),
            told_twice=sum(1 for n in told.values() if n > 1),
            told_older=len(told.keys() - newest),
            lost=len(newest - told.keys()),
        )
    figures(
        "deadlocks",
        processes=PROCESSES,
        rounds=rounds,
        rows=totals["rows"],
        cycles=totals["cycles"],
        failed_cycles=totals["failed_cycles"],
        deadlocks_broken=_deadlocks() - deadlocks_before,
        sent=totals["sent"],
        superseded=totals["superseded"],
        told_twice=totals["told_twice"],
        told_older=totals["told_older"],
        lost=totals["lost"],
    )
    assert errors == []
    assert totals["told_twice"] == 0
    assert totals["told_older"] == 0
    assert totals["lost"] == 0
    assert totals["told"] == totals["sent"] == rounds * WATCHES
    assert totals["superseded"] == rounds * WATCHES * (DAYS - 1)


def _backlog(devices, listings) -> list[Watch]:
    """WATCHES watches over a few devices (their rows share batches and digests), each with
    a due detection for each of the last DAYS days, as after an outage."""
    watches = Watch.objects.bulk_create(
        Watch(
            device=devices[i % len(devices)],
            listing=listings[i % len(listings)],
            trigger=Trigger.TARGET_PRICE,
            target_price=950,
        )
        for i in range(WATCHES)
    )
    now = timezone.now()
    assert (
        enqueue_many(
            Detection(
                watch_id=w.pk,
                device_id=w.device_id,
                channel=Channel.WEBPUSH,
                trigger=Trigger.TARGET_PRICE,
                detected_at=now - dt.timedelta(days=day),
                payload={"price": 900, "effective_price": 900, "line": "950"},
            )
            for w in watches
            for day in range(DAYS)
        )
        == WATCHES * DAYS
    )
    return watches


def _deadlocks() -> int:
    """How many deadlocks PostgreSQL has broken in this database so far (its statistics are
    flushed within a second or so: a figure, not an assertion)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]
