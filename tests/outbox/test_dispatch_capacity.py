"""Dispatch capacity: each tick of `outbox-dispatch` runs OUTBOX_DISPATCHERS cycles on
PostgreSQL (one itself, the others queued for any worker), one on SQLite; and a poll's
observation younger than OUTBOX_REFETCH_MAX_AGE serves as the dispatcher's re-fetch, counted
at the fake Ichiba. Several dispatchers side by side keep their guarantees in
tests/reliability/test_concurrency_processes.py."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.db import connection
from django_q.brokers.orm import ORM
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from outbox import tasks
from outbox.dispatch import run_cycle
from outbox.models import DispatchRun, Outbox, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from watches.models import Trigger
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)


def queued(broker: ORM) -> list[str]:
    rows = OrmQ.objects.filter(key=broker.list_key)
    return [SignedPackage.loads(row.payload)["func"] for row in rows]


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="several dispatchers per tick: PostgreSQL only"
)
def test_a_tick_on_postgresql_runs_outbox_dispatchers_cycles(settings):
    settings.OUTBOX_DISPATCHERS = 3
    broker = ORM(list_key="test-dispatch-fan-out")
    tasks.dispatch(broker)
    assert queued(broker) == ["outbox.tasks.dispatch_extra"] * 2
    assert DispatchRun.objects.count() == 1  # the tick's own cycle ran

    tasks.dispatch_extra()
    assert DispatchRun.objects.count() == 2


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single dispatcher")
def test_a_tick_on_sqlite_runs_one_cycle_whatever_outbox_dispatchers_says(settings):
    settings.OUTBOX_DISPATCHERS = 3
    broker = ORM(list_key="test-dispatch-fan-out")
    tasks.dispatch(broker)
    assert queued(broker) == []
    assert DispatchRun.objects.count() == 1


@pytest.fixture
def crossed(time_machine, ichiba):
    """A watch on a Rakuten listing whose price the poll at T0 sees cross its target."""
    time_machine.move_to(T0, tick=False)
    ichiba.add("shop:fresh", price=1000)
    listing = ListingFactory(
        source="rakuten",
        item_code="shop:fresh",
        price=1000,
        shipping=0,
        in_stock=True,
        units_per_pack=None,
        last_polled_at=T0 - dt.timedelta(hours=1),
    )
    WatchFactory(
        listing=listing, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=900
    )
    ichiba.add("shop:fresh", price=880)
    poll(codes=["shop:fresh"])
    assert Outbox.objects.filter(status=Status.PENDING).count() == 1
    assert len(ichiba.requests) == 1
    return ichiba


def test_a_fresh_poll_observation_is_the_dispatchers_refetch(crossed, time_machine, settings):
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    time_machine.move_to(T0 + dt.timedelta(seconds=20), tick=False)
    result = run_cycle()
    assert result.by_status[Status.SENT] == 1
    assert len(crossed.requests) == 1  # one request at the marketplace, not two
    row = Outbox.objects.get()
    assert row.events.filter(to_status=Status.SENT).get().data["fresh_age_seconds"] == 20.0


def test_an_older_poll_observation_is_fetched_again(crossed, time_machine, settings):
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    time_machine.move_to(T0 + dt.timedelta(seconds=40), tick=False)
    result = run_cycle()
    assert result.by_status[Status.SENT] == 1
    assert len(crossed.requests) == 2


# A django-q2 worker as the cluster starts it, in a fresh process: its first task is STOP.
WORKER = """
import gc, json, sys
import django
django.setup()
from multiprocessing import Queue, Value
from django_q.worker import worker

before = {
    "frozen": gc.get_freeze_count(),
    "dispatch": "outbox.dispatch" in sys.modules,
    "webpush": "outbox.channels.webpush" in sys.modules,
}
tasks = Queue()
tasks.put("STOP")
worker(tasks, Queue(), Value("f", -1))
print(json.dumps({
    "before": before,
    "frozen": gc.get_freeze_count(),
    "loaded": [name in sys.modules for name in ("outbox.dispatch", "watches.polling.poll")],
    "channels": [name in sys.modules for name in ("outbox.channels.webpush", "pywebpush")],
}))
"""


def test_a_worker_freezes_what_its_tasks_load_before_its_first_task(tmp_path):
    import json

    from tests.demo.test_demo_app import environment, run

    result = run(environment(tmp_path), "-c", WORKER)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["before"] == {"frozen": 0, "dispatch": False, "webpush": False}
    # The dispatcher's and the poll's modules were imported at spawn, and with Django they
    # are out of the collector's walks (tens of thousands of objects); so were the delivery
    # channels and what they bring (the first push does not pay for importing pywebpush).
    assert seen["loaded"] == [True, True]
    assert seen["channels"] == [True, True]
    assert seen["frozen"] > 10_000
