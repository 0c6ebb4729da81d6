"""A growing fleet on PostgreSQL + Redis keeps both promises at once: every notification goes
out exactly once, and the marketplace never sees more than its budget.

Two `manage.py qcluster` processes, then a third halfway, run the real schedules — polling
(`watches-poll`) and dispatch (`outbox-dispatch`, which fans out to OUTBOX_DISPATCHERS
cycles) — plus poll and dispatch tasks pushed onto the same Redis queue, over a queue that
grows the whole time: new watches that the next poll detects, prices that move across the
watchers' targets, and rows enqueued directly. Every listing is on the fake Rakuten Ichiba
with two application ids at 1 request/s each, as the real one allows: polling and the
dispatcher's re-fetches from every process take their requests from the fleet's budget in
Redis, and each poll plans as if the budget were its own, so together they ask for more
than it gives and the limiter is what paces them (`utilisation`: requests made / allowed).

The fake Ichiba counts each id's requests per wall-clock second of arrival, and answers 429
beyond the budget as the real one would: the test asserts the most any second saw, and that
no 429 was answered. No process is SIGKILLed here, so the suite's SIGKILL rule allows no
duplicate: every row ends sent (delivered exactly once) or dropped/failed with a reason.

Small (make test-pg): 16 s of load, about 30 s in all; full (--reliability-full): 5
minutes. Needs PostgreSQL (several processes claim side by side) and Redis
(RELIABILITY_REDIS, database RELIABILITY_FLEET_REDIS_DB, default 12, flushed before and
after); skipped with a reason otherwise."""

from __future__ import annotations

import math
import os
import random
import time
from itertools import pairwise

import pytest
import redis
from django.db import connection
from django.db.models import Count
from django_q.models import Schedule, Task
from django_q.scheduler import scheduler
from django_q.tasks import async_task

from outbox.models import DispatchRun
from tests.fakes.ichiba import FakeIchiba, key_for
from tests.reliability.fleet_world import (
    account,
    add_watches,
    flip_price,
    open_rows,
    rakuten_listings,
    reasons,
    session_pids,
)
from tests.reliability.world import (
    RedisQueue,
    child_env,
    due_rows,
    log_tail,
    redis_database,
    start_cluster,
    stop,
    subscribed_devices,
)
from yasugoro.schedules import ensure_schedule, remove_schedule

REDIS_SERVER = os.environ.get("RELIABILITY_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = int(os.environ.get("RELIABILITY_FLEET_REDIS_DB", "12"))
APP_IDS = ("fleet-app-a", "fleet-app-b")
BUDGET = 1  # requests per second per application id: the real Ichiba's allowance
WORKERS = 2


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL): several processes claim side by side")


@pytest.fixture
def fleet_redis():
    yield from redis_database(REDIS_SERVER, REDIS_DB)


@pytest.fixture
def budgeted_ichiba():
    fake = FakeIchiba()
    fake.accept(*APP_IDS)
    fake.per_second = BUDGET
    fake.start()
    yield fake
    fake.stop()


@pytest.mark.django_db(transaction=True)
def test_a_growing_fleet_delivers_exactly_once_within_the_marketplace_budget(
    postgres, fleet_redis, budgeted_ichiba, push_service, full, figures, tmp_path
):
    ichiba = budgeted_ichiba
    # seconds of load, seconds a step, listings, new watches and direct rows a step
    duration, step, size, grow, direct = (300, 10.0, 120, 3, 5) if full else (16, 2.0, 30, 2, 3)
    rng = random.Random(12)
    devices = subscribed_devices(push_service, 20)
    listings = rakuten_listings(ichiba, size)
    watches = add_watches(devices, listings, 0, size)
    ensure_schedule("outbox-dispatch", "outbox.tasks.dispatch", minutes=1)
    ensure_schedule("watches-poll", "watches.tasks.poll", minutes=1)
    queue = RedisQueue(fleet_redis)
    env = child_env(
        DJANGO_SETTINGS_MODULE="tests.reliability.fleet_settings",
        REDIS_URL=fleet_redis,
        RAKUTEN_APP_IDS=",".join(f"{app_id}:{key_for(app_id)}" for app_id in APP_IDS),
        RAKUTEN_API_URL=ichiba.url,
        RAKUTEN_RATE_PER_SECOND=BUDGET,
        Q_WORKERS=WORKERS,
        POLL_MINUTES=1,
        # A run plans 2 ids × 1/s × POLL_MAX_SECONDS × 0.8 requests: 32 (full), 8 (small);
        # with the re-fetches, more than the budget gives.
        POLL_MAX_SECONDS=20 if full else 5,
        POLL_BATCH_SIZE=4,
        OUTBOX_BATCH_SIZE=20,
        OUTBOX_DISPATCHERS=2,
    )
    clusters = [start_cluster(env, tmp_path, f"qcluster-{n}") for n in range(2)]
    pids: list[set[int]] = [set(), set(), set()]
    polls: list[str] = []
    direct_rows: list[int] = []
    started = time.monotonic()
    try:
        for n in range(math.ceil(duration / step)):
            if n == 0 and not full:
                # A cluster's scheduler first looks 30 s after it started: the small run asks
                # the schedules itself, once, as a sentinel would (the full run leaves it to
                # the clusters, every 30 s).
                scheduler(broker=queue)
            if n == math.ceil(duration / step / 2):
                clusters.append(start_cluster(env, tmp_path, "qcluster-2"))
            watches = add_watches(devices, listings, watches, grow)
            direct_rows += due_rows(devices, rng.sample(listings, direct), direct)
            flip_price(ichiba, rng.choice(listings))
            async_task("outbox.tasks.dispatch", broker=queue, group="fleet-dispatch")
            if n % 2 == 0:
                polls.append(async_task("watches.tasks.poll", broker=queue, group="fleet-poll"))
            for i, cluster in enumerate(clusters):
                assert cluster.poll() is None, f"qcluster-{i} died"
                pids[i] |= session_pids(cluster)
            time.sleep(max(0.0, started + (n + 1) * step - time.monotonic()))
        loaded = time.monotonic() - started

        # Drain: no poll after this one (it could enqueue past the count), then dispatch until
        # every row is terminal and the third cluster has taken a cycle.
        last = Schedule.objects.filter(name="watches-poll").values_list("task", flat=True).first()
        remove_schedule("watches-poll")
        polls += [last] if last else []
        deadline = time.monotonic() + (240 if full else 60)
        while time.monotonic() < deadline:
            pids[2] |= session_pids(clusters[2])
            polling = Task.objects.filter(id__in=polls).count() < len(polls)
            third = _cycles_by(pids[2])
            if not polling and not open_rows() and third:
                break
            async_task("outbox.tasks.dispatch", broker=queue, group="fleet-dispatch")
            time.sleep(2.0)
        elapsed = time.monotonic() - started
    finally:
        for cluster in clusters:
            stop(cluster, timeout=30)
    logs = "\n".join(log_tail(tmp_path, f"qcluster-{n}") for n in range(len(clusters)))

    books = account(push_service.deliveries_by_tag())
    most = ichiba.max_per_second()
    requests = {app_id: len(ichiba.arrivals[app_id]) for app_id in APP_IDS}
    busy = {app_id: len({int(at) for at in ichiba.arrivals[app_id]}) for app_id in APP_IDS}
    arrivals = {app_id: sorted(ichiba.arrivals[app_id]) for app_id in APP_IDS}
    with redis.from_url(fleet_redis) as client:
        used = client.scan_iter("yasugoro:ratelimit:*:used:*")
        slots = sum(int(client.get(key)) for key in used)
    scheduled = Task.objects.filter(group__in=["outbox-dispatch", "watches-poll"])
    figures(
        "fleet",
        clusters=len(clusters),
        seconds=round(elapsed),
        load_seconds=round(loaded),
        requests=requests,
        max_per_second=most,
        busy_seconds=busy,
        # requests made / requests the budget allowed over the whole run
        utilisation=round(sum(requests.values()) / (BUDGET * len(APP_IDS) * elapsed), 2),
        # the least time between two requests of one id, and between a request and the
        # nearest second boundary (how much later it could have arrived and still counted
        # in its own second)
        min_gap=round(min(b - a for at in arrivals.values() for a, b in pairwise(at)), 3),
        margin=round(min(min(t % 1, 1 - t % 1) for at in arrivals.values() for t in at), 3),
        # slots the limiter gave out but nobody used (a caller woke too late for it)
        slots_missed=slots - sum(requests.values()),
        answered_429=ichiba.too_many,
        rows=books.rows,
        rows_direct=len(direct_rows),
        statuses=dict(books.by_status),
        reasons=reasons(),
        deliveries=books.deliveries,
        duplicates=books.duplicates,
        lost=books.lost,
        third_cluster_cycles=_cycles_by(pids[2]),
        scheduled_runs=dict(scheduled.values_list("group").annotate(n=Count("id"))),
        extra_cycles=Task.objects.filter(group="outbox-dispatch-extra").count(),
    )
    # The marketplace's budget, as it counts: per id, per wall-clock second of arrival.
    assert set(most) == set(APP_IDS), f"not every application id was used: {most}"
    assert max(most.values()) <= BUDGET, f"the fake Ichiba saw more than the budget: {most}"
    assert ichiba.too_many == 0
    # Exactly once: every row terminal, each sent row delivered once, nothing else delivered.
    assert open_rows() == 0, logs
    assert books.lost == 0, logs
    assert books.duplicates == 0
    assert books.unexplained == 0
    assert books.no_reason == 0
    assert books.by_status["sent"] > 0
    # The queue grew from polling too, not only from rows enqueued directly.
    assert books.rows > len(direct_rows), "polling enqueued nothing"
    # The fleet was the whole fleet: the real schedules ran, the tick fanned out, the third
    # cluster took part.
    assert {"outbox-dispatch", "watches-poll"} <= set(scheduled.values_list("group", flat=True))
    assert Task.objects.filter(group="outbox-dispatch-extra").exists()
    assert _cycles_by(pids[2]) > 0, "the third cluster never ran a dispatch cycle"


def _cycles_by(pids: set[int]) -> int:
    """Dispatch cycles run by these processes (a cycle's holder is host:pid:token)."""
    holders = DispatchRun.objects.values_list("holder", flat=True)
    return sum(1 for holder in holders if int(holder.split(":")[1]) in pids)
