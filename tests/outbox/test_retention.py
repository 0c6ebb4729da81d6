"""Retention: terminal rows and their events go after OUTBOX_RETENTION_DAYS, in batches;
rows still in the queue stay however old; old dispatch cycles go too."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.core.management import call_command

from outbox import tasks
from outbox.models import DispatchRun, Outbox, OutboxEvent, Status
from outbox.retention import purge
from tests.factories import DispatchRunFactory, OutboxEventFactory, OutboxFactory, WatchFactory

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 6, 1, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def aged_rows() -> dict[str, Outbox]:
    """One row per status that last moved 91 days ago (just past the default 90), and one
    of each terminal status that moved 89 days ago. Each with two events."""
    watch = WatchFactory()
    rows: dict[str, Outbox] = {}
    day = 0
    for age, statuses in ((91, list(Status)), (89, [Status.SENT, Status.DROPPED, Status.FAILED])):
        for status in statuses:
            day += 1
            moved = NOW - dt.timedelta(days=age)
            row = OutboxFactory.create(
                watch=watch,
                status=status,
                reason="x",
                updated_at=moved,
                detected_at=moved - dt.timedelta(days=day),
            )
            OutboxEventFactory.create_batch(2, outbox=row)
            rows[f"{status}-{age}"] = row
    return rows


def remaining() -> set[tuple[str, int]]:
    return {(row.status, (NOW - row.updated_at).days) for row in Outbox.objects.all()}


def test_deletes_only_old_terminal_rows_and_their_events(aged_rows):
    with time_machine.travel(NOW, tick=False):
        result = purge(batch=2)  # several batches
    assert result.outbox == 3 and result.events == 6
    assert remaining() == {
        ("pending", 91),
        ("sending", 91),
        ("retry", 91),  # never touched, however old
        ("sent", 89),
        ("dropped", 89),
        ("failed", 89),  # not old enough
    }
    kept = set(Outbox.objects.values_list("id", flat=True))
    assert set(OutboxEvent.objects.values_list("outbox_id", flat=True)) == kept
    assert OutboxEvent.objects.count() == 2 * len(kept)


def test_retention_days_come_from_settings(aged_rows, settings):
    settings.OUTBOX_RETENTION_DAYS = 30
    with time_machine.travel(NOW, tick=False):
        assert purge().outbox == 6
    assert {status for status, _ in remaining()} == {"pending", "sending", "retry"}


def test_prunes_old_dispatch_runs(settings):
    settings.OUTBOX_DISPATCH_RUN_RETENTION_DAYS = 14
    old = DispatchRunFactory(started_at=NOW - dt.timedelta(days=15))
    recent = DispatchRunFactory(started_at=NOW - dt.timedelta(days=13))
    with time_machine.travel(NOW, tick=False):
        assert purge(batch=1).dispatch_runs == 1
    assert list(DispatchRun.objects.values_list("id", flat=True)) == [recent.pk]
    assert not DispatchRun.objects.filter(pk=old.pk).exists()


def test_the_scheduled_task_runs_the_purge(aged_rows):
    with time_machine.travel(NOW, tick=False):
        assert tasks.retention() == {"outbox": 3, "events": 6, "dispatch_runs": 0}


def test_migrate_creates_the_daily_retention_schedule_once():
    from django_q.models import Schedule

    call_command("migrate", verbosity=0)
    call_command("migrate", verbosity=0)
    (schedule,) = Schedule.objects.filter(name="outbox-retention")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == (
        "outbox.tasks.retention",
        Schedule.MINUTES,
        1440,
    )
