"""Four dispatcher processes over the same due rows, through the real Web Push channel to the
fake push service: every row delivered exactly once and `sent`."""

from __future__ import annotations

import pytest

from outbox.models import Outbox, Status
from tests.reliability.world import (
    child_env,
    demo_listings,
    dispatcher_processes,
    due_rows,
    log_tail,
    not_terminal,
    start_dispatcher,
    stop,
    subscribed_devices,
    wait_for,
)

PROCESSES = 4


@pytest.mark.django_db(transaction=True)
def test_four_dispatcher_processes_deliver_each_row_exactly_once(
    push_service, full, figures, tmp_path
):
    size = 5000 if full else 300
    devices = subscribed_devices(push_service, 100 if full else 20)
    rows = due_rows(devices, demo_listings(50 if full else 10), size)
    # Small batches, so the four really interleave their claims.
    env = child_env(OUTBOX_BATCH_SIZE=100 if full else 25)
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{n}" for n in range(PROCESSES)]
    procs = [
        start_dispatcher(env, tmp_path, f"dispatcher-{n}", ready=ready[n], go=go)
        for n in range(PROCESSES)
    ]
    try:
        wait_for(ready, procs, timeout=60)
        go.touch()
        for proc in procs:
            proc.wait(timeout=600 if full else 120)
    finally:
        for proc in procs:
            stop(proc)
    logs = "\n".join(log_tail(tmp_path, f"dispatcher-{n}") for n in range(PROCESSES))
    assert all(proc.returncode == 0 for proc in procs), logs

    deliveries = push_service.deliveries_by_tag()
    duplicates = sum(n - 1 for n in deliveries.values() if n > 1)
    sent = Outbox.objects.filter(id__in=rows, status=Status.SENT).count()
    lost = size - len(deliveries)
    figures(
        "concurrency",
        processes=PROCESSES,
        rows=size,
        pushes=len(push_service.accepted()),
        deliveries=sum(deliveries.values()),
        duplicates=duplicates,
        lost=lost,
        terminal=f"{size - not_terminal(rows)}/{size}",
        sent=sent,
        dispatchers_that_claimed=len(dispatcher_processes(rows)),
    )
    stray = list(
        Outbox.objects.filter(id__in=rows)
        .exclude(status=Status.SENT)
        .values_list("status", "reason", "detail")[:5]
    )
    assert sum(deliveries.values()) == size, (stray, logs)
    assert duplicates == 0
    assert lost == 0
    assert sent == size
    assert not push_service.received or all(r.accepted for r in push_service.received)
    assert len(dispatcher_processes(rows)) >= 2, "the processes never overlapped"
