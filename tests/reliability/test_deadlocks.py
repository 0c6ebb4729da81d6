"""Dispatcher processes over the same backlogs on PostgreSQL: their claims, `superseded`
drops, lease beats and recordings lock overlapping rows at the same moments, and the
database breaks any deadlock among them by failing one statement. No cycle may end on it:
every `DispatchRun` ends without an error, every watch is told once (its newest detection),
nothing is told twice and nothing is lost — pass after pass."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from pathlib import Path

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
# was run again on one: docs/decisions/0063-deadlocks.md).
PROCESSES = 6
WATCHES, DAYS, DEVICES, BATCH = 8, 30, 2, 5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_dispatchers_over_overlapping_backlogs_end_every_cycle_without_an_error(
    push_service, full, figures, tmp_path
):
    passes = 100 if full else 10
    push_service.delay = 0.05
    devices = subscribed_devices(push_service, DEVICES)
    listings = demo_listings(DEVICES * 2)
    env = child_env(OUTBOX_BATCH_SIZE=BATCH)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(PROCESSES)]
    # The same processes pass after pass: each pass they start their cycles together.
    procs = [
        start_dispatcher(env, tmp_path, f"d{n}", ready=ready[n], go=go, passes=passes)
        for n in range(PROCESSES)
    ]
    totals: Counter[str] = Counter()
    errors: list[str] = []
    deadlocks_before = _deadlocks()
    try:
        wait_for(ready, procs, timeout=60)
        for run in range(1, passes + 1):
            watches = _backlog(devices, listings)
            before = set(DispatchRun.objects.values_list("id", flat=True))
            (go if run == 1 else tmp_path / f"go-{run}").touch()
            _wait_for_round([Path(f"{path}-{run}") for path in ready], procs)

            runs = DispatchRun.objects.exclude(id__in=before)
            failed = [error for error in runs.values_list("error", flat=True) if error]
            errors += failed
            rows = list(
                Outbox.objects.filter(watch__in=watches).order_by("watch_id", "detected_at")
            )
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
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            stop(proc)
    logs = "\n".join(log_tail(tmp_path, f"d{n}") for n in range(PROCESSES))
    assert all(proc.returncode == 0 for proc in procs), logs
    figures(
        "deadlocks",
        processes=PROCESSES,
        passes=passes,
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
    assert totals["told"] == totals["sent"] == passes * WATCHES
    assert totals["superseded"] == passes * WATCHES * (DAYS - 1)


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


def _wait_for_round(done: list[Path], procs: list, timeout: float = 120) -> None:
    """Until every process says it finished the pass (after the last pass they exit)."""
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in done):
        dead = [
            p.args
            for p, path in zip(procs, done, strict=True)
            if p.poll() is not None and not path.exists()
        ]
        if dead or time.monotonic() > deadline:
            raise AssertionError(f"the pass never ended (exited early: {dead})")
        time.sleep(0.01)


def _deadlocks() -> int:
    """How many deadlocks PostgreSQL has broken in this database so far (its statistics are
    flushed within a second or so: a figure, not an assertion)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]
