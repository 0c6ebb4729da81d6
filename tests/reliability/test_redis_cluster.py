"""Two `qcluster` processes on the Redis broker dispatch a stream of due rows without a
duplicate: the `outbox-dispatch` schedule (full size: a couple of minutes of load, rows
arriving in waves) plus dispatch tasks pushed onto the same Redis queue, so the two clusters'
workers really run cycles at the same time. On PostgreSQL each dispatch task also queues a
second cycle (OUTBOX_DISPATCHERS=2), which the other workers take.

Redis: REDIS_URL's server, database RELIABILITY_REDIS_DB (default 13), flushed before and
after; skipped with a reason when no Redis answers."""

from __future__ import annotations

import os
import time

import pytest
from django.db import connection
from django_q.models import Task
from django_q.tasks import async_task

from outbox.models import Outbox, Status
from tests.reliability.world import (
    RedisQueue,
    child_env,
    demo_listings,
    dispatcher_processes,
    due_rows,
    log_tail,
    not_terminal,
    redis_database,
    start_cluster,
    stop,
    subscribed_devices,
)
from yasugoro.schedules import ensure_schedule

REDIS_SERVER = os.environ.get("RELIABILITY_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = int(os.environ.get("RELIABILITY_REDIS_DB", "13"))
CLUSTERS = 2


@pytest.fixture
def redis_url():
    yield from redis_database(REDIS_SERVER, REDIS_DB)


@pytest.mark.django_db(transaction=True)
def test_two_qclusters_on_redis_dispatch_without_a_duplicate(
    redis_url, push_service, full, figures, tmp_path
):
    waves, per_wave, gap = (6, 50, 15.0) if full else (1, 60, 0.0)
    deadline_seconds = 240 if full else 90
    ensure_schedule("outbox-dispatch", "outbox.tasks.dispatch", minutes=1)
    devices = subscribed_devices(push_service, 20)
    listings = demo_listings(10)
    broker = RedisQueue(redis_url)
    env = child_env(REDIS_URL=redis_url, Q_WORKERS=2, OUTBOX_BATCH_SIZE=20, OUTBOX_DISPATCHERS=2)
    clusters = [start_cluster(env, tmp_path, f"qcluster-{n}") for n in range(CLUSTERS)]
    rows: list[int] = []
    started = time.monotonic()
    try:
        for wave in range(waves):
            rows += due_rows(devices, listings, per_wave)
            for _ in range(CLUSTERS):
                async_task("outbox.tasks.dispatch", broker=broker)
            if wave < waves - 1:
                time.sleep(gap)
        while not_terminal(rows) and time.monotonic() - started < deadline_seconds:
            assert all(c.poll() is None for c in clusters), "a qcluster died"
            time.sleep(0.5)
        elapsed = time.monotonic() - started
    finally:
        for cluster in clusters:
            stop(cluster, timeout=30)
    logs = "\n".join(log_tail(tmp_path, f"qcluster-{n}") for n in range(CLUSTERS))

    deliveries = push_service.deliveries_by_tag()
    duplicates = sum(n - 1 for n in deliveries.values() if n > 1)
    sent = Outbox.objects.filter(id__in=rows, status=Status.SENT).count()
    scheduled = Task.objects.filter(group="outbox-dispatch").count()
    extra = Task.objects.filter(group="outbox-dispatch-extra").count()
    figures(
        "redis",
        clusters=CLUSTERS,
        rows=len(rows),
        seconds=round(elapsed),
        deliveries=sum(deliveries.values()),
        duplicates=duplicates,
        lost=len(rows) - len(deliveries),
        terminal=f"{len(rows) - not_terminal(rows)}/{len(rows)}",
        dispatcher_processes=len(dispatcher_processes(rows)),
        scheduled_runs=scheduled,
        extra_cycles=extra,
    )
    assert sent == len(rows), logs
    assert sum(deliveries.values()) == len(rows)
    assert duplicates == 0
    if connection.vendor == "postgresql":
        assert extra >= CLUSTERS, "the dispatch tasks queued no second cycle"
    else:
        assert extra == 0, "SQLite runs one cycle a tick"
    if full:
        assert scheduled >= 1, "the outbox-dispatch schedule never ran"
