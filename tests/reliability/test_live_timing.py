"""Exactly once under real timing, with several live dispatcher processes (issue 11):

- a dispatcher that works through batch after batch of a long cycle, beside another that
  runs `dispatch_outbox --limit 1` every 2 s, never has its rows taken over: the lease is
  counted from each claim and renewed while the batch is worked on (0 duplicates, 0
  `lease_expired`);
- four dispatchers over watches with a backlog of due rows each (as after an outage) send
  one notification per watch: the newest detection, the older ones `superseded`.

Neither involves a process dying: each was a way to break the promise with every process
alive."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections import Counter

import pytest
from django.utils import timezone

from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.reliability.world import (
    ROOT,
    child_env,
    demo_listings,
    due_rows,
    log_tail,
    not_terminal,
    start_dispatcher,
    stop,
    subscribed_devices,
    wait_for,
)
from watches.models import Channel, Trigger, Watch

# Written out, so that this file also runs (and fails) where the reason does not exist yet.
SUPERSEDED = "superseded"


@pytest.mark.django_db(transaction=True)
def test_a_live_dispatcher_keeps_its_rows_beside_one_that_recovers_leases_every_2_s(
    push_service, full, figures, tmp_path
):
    # Full: the reproduction (lease 20 s, batches of 50). Small: the same shape in
    # less time — the lease is as short as the heartbeat's floor allows for these timeouts.
    rows_n, lease, batch = (400, 20, 50) if full else (125, 10, 25)
    connect, read = (2, 5) if full else (0.5, 1)  # floor: 2 × (connect + read) + 5 s
    push_service.delay = 0.25
    devices = subscribed_devices(push_service, 20)
    rows = due_rows(devices, demo_listings(10), rows_n)
    env = child_env(
        OUTBOX_LEASE_SECONDS=lease,
        OUTBOX_BATCH_SIZE=batch,
        OUTBOX_DELIVERY_WORKERS=2,
        OUTBOX_CYCLE_SECONDS=50,
        WEBPUSH_CONNECT_TIMEOUT=connect,
        WEBPUSH_READ_TIMEOUT=read,
        EMAIL_TIMEOUT=connect + read,
    )
    go, ready = tmp_path / "go", tmp_path / "ready"
    looping = start_dispatcher(env, tmp_path, "looping", ready=ready, go=go)
    limited: list[subprocess.Popen] = []
    try:
        wait_for([ready], [looping], timeout=60)
        go.touch()
        while looping.poll() is None:
            time.sleep(2)
            with open(tmp_path / f"limited-{len(limited)}.log", "w") as out:
                limited.append(
                    subprocess.Popen(
                        [sys.executable, "manage.py", "dispatch_outbox", "--limit", "1"],
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        for proc in limited:
            proc.wait(timeout=120)
    finally:
        stop(looping)
        for proc in limited:
            stop(proc)
    assert looping.returncode == 0, log_tail(tmp_path, "looping")
    assert all(p.returncode == 0 for p in limited), log_tail(tmp_path, "limited-0")

    copies = push_service.deliveries_by_tag()
    duplicates = sum(n - 1 for n in copies.values() if n > 1)
    expired = OutboxEvent.objects.filter(outbox_id__in=rows, reason=Reason.LEASE_EXPIRED).count()
    figures(
        "live-timing",
        rows=rows_n,
        lease=lease,
        limited_runs=len(limited),
        deliveries=sum(copies.values()),
        duplicates=duplicates,
        lease_expired=expired,
        terminal=f"{rows_n - not_terminal(rows)}/{rows_n}",
    )
    assert duplicates == 0
    assert expired == 0
    assert Outbox.objects.filter(id__in=rows, status=Status.SENT).count() == rows_n


@pytest.mark.django_db(transaction=True)
def test_four_dispatchers_over_a_backlog_send_one_notification_per_watch(
    push_service, figures, tmp_path
):
    watches_n, days, processes = 20, 10, 4
    devices = subscribed_devices(push_service, watches_n)
    listings = demo_listings(5)
    watches = Watch.objects.bulk_create(
        Watch(
            device=devices[i],
            listing=listings[i % len(listings)],
            trigger=Trigger.TARGET_PRICE,
            target_price=950,
        )
        for i in range(watches_n)
    )
    now = timezone.now()
    backlog = [
        Detection(
            watch_id=w.pk,
            device_id=w.device_id,
            channel=Channel.WEBPUSH,
            trigger=Trigger.TARGET_PRICE,
            detected_at=now - dt.timedelta(days=day),
            payload={"price": 900, "effective_price": 900, "line": "950"},
        )
        for w in watches
        for day in range(days)
    ]
    assert enqueue_many(backlog) == watches_n * days
    # Small batches, so the four really interleave their claims.
    env = child_env(OUTBOX_BATCH_SIZE=15)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(processes)]
    procs = [
        start_dispatcher(env, tmp_path, f"backlog-{n}", ready=ready[n], go=go)
        for n in range(processes)
    ]
    try:
        wait_for(ready, procs, timeout=60)
        go.touch()
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            stop(proc)
    assert all(p.returncode == 0 for p in procs), log_tail(tmp_path, "backlog-0")

    delivered_to = Counter(r.subscriber_id for r in push_service.accepted())
    rows = Outbox.objects.filter(watch__in=watches)
    outcomes = Counter(rows.values_list("status", "reason"))
    newest_sent = all(
        rows.filter(watch=w).order_by("-detected_at").first().status == Status.SENT for w in watches
    )
    figures(
        "backlog",
        watches=watches_n,
        rows=watches_n * days,
        processes=processes,
        deliveries=sum(delivered_to.values()),
        watches_told_twice=sum(1 for n in delivered_to.values() if n > 1),
        superseded=outcomes[(Status.DROPPED, SUPERSEDED)],
    )
    assert sorted(delivered_to.values()) == [1] * watches_n, "exactly one per watch"
    # On a failure: what became of each row that was neither sent nor superseded.
    odd = rows.exclude(status=Status.SENT).exclude(reason=SUPERSEDED)
    stories = {
        row.pk: list(row.events.order_by("id").values_list("to_status", "reason", "actor"))
        for row in odd
    }
    assert outcomes == {
        (Status.SENT, Reason.DELIVERED): watches_n,
        (Status.DROPPED, SUPERSEDED): watches_n * (days - 1),
    }, stories
    assert newest_sent, "the newest detection is the one sent"
