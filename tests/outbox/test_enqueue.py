"""Idempotent enqueue: the database itself folds one watch/trigger/day/channel into one row."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
from django.db import IntegrityError, connection, transaction

from outbox.enqueue import Detection, enqueue, enqueue_many
from outbox.models import Outbox, Status
from outbox.transitions import Outcome, transition
from tests.factories import WatchFactory

UTC = dt.UTC
JST = dt.timezone(dt.timedelta(hours=9))

pytestmark = pytest.mark.django_db


def _detect(watch, at: dt.datetime) -> Detection:
    return Detection.for_watch(watch, at, {"price": 900})


@pytest.mark.parametrize(
    ("first", "second", "rows"),
    [
        # the same Tokyo day
        (
            dt.datetime(2026, 11, 29, 14, 0, tzinfo=UTC),
            dt.datetime(2026, 11, 29, 14, 59, tzinfo=UTC),
            1,
        ),
        # 14:59 UTC is 23:59 JST, 15:01 UTC is 00:01 JST the next day
        (
            dt.datetime(2026, 11, 29, 14, 59, tzinfo=UTC),
            dt.datetime(2026, 11, 29, 15, 1, tzinfo=UTC),
            2,
        ),
        (
            dt.datetime(2026, 11, 29, 23, 59, tzinfo=JST),
            dt.datetime(2026, 11, 30, 0, 1, tzinfo=JST),
            2,
        ),
        # the same UTC day, two Tokyo days
        (
            dt.datetime(2026, 11, 29, 1, 0, tzinfo=UTC),
            dt.datetime(2026, 11, 29, 16, 0, tzinfo=UTC),
            2,
        ),
    ],
)
def test_rows_fold_per_tokyo_day(first, second, rows):
    watch = WatchFactory()
    assert enqueue(watch, first, {"price": 900}) is True
    enqueue(watch, second, {"price": 880})
    assert Outbox.objects.filter(watch=watch).count() == rows


def test_enqueue_returns_false_for_a_duplicate():
    watch = WatchFactory()
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert enqueue(watch, at, {"price": 900}) is True
    assert enqueue(watch, at + dt.timedelta(hours=2), {"price": 850}) is False
    row = Outbox.objects.get(watch=watch)
    assert row.detected_payload == {"price": 900}, "the first detection's snapshot is kept"


def test_other_trigger_and_other_watch_are_separate_rows():
    watch = WatchFactory()
    other = WatchFactory(device=watch.device, listing=watch.listing, trigger="lowest")
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert enqueue_many([_detect(watch, at), _detect(other, at), _detect(watch, at)]) == 2


def test_dropped_row_frees_its_days_slot():
    watch = WatchFactory()
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert enqueue(watch, at, {"price": 900})
    row = Outbox.objects.get(watch=watch)
    transition([row.pk], Outcome(Status.DROPPED, "condition_lost"))
    assert enqueue(watch, at + dt.timedelta(hours=3), {"price": 890}) is True
    assert Outbox.objects.filter(watch=watch).count() == 2


def test_sent_row_keeps_holding_its_days_slot():
    watch = WatchFactory()
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    enqueue(watch, at, {"price": 900})
    Outbox.objects.filter(watch=watch).update(status=Status.SENT)
    assert enqueue(watch, at + dt.timedelta(hours=3), {"price": 850}) is False


def test_enqueue_many_counts_only_inserted_rows():
    watches = WatchFactory.create_batch(5)
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert enqueue_many([_detect(w, at) for w in watches[:3]]) == 3
    assert enqueue_many([_detect(w, at) for w in watches]) == 2
    assert Outbox.objects.count() == 5


def test_enqueue_many_over_many_statements():
    watches = WatchFactory.create_batch(3)
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    detections = [_detect(w, at + dt.timedelta(days=day)) for day in range(400) for w in watches]
    assert enqueue_many(detections) == 1200
    assert enqueue_many(detections) == 0


def test_not_null_violation_is_not_swallowed():
    """ON CONFLICT DO NOTHING folds only uniqueness conflicts (INSERT OR IGNORE would hide this)."""
    watch = WatchFactory()
    bad = Detection(watch.pk, watch.device_id, "console", "target_price", None, {})
    with pytest.raises(IntegrityError), transaction.atomic():
        enqueue_many([bad])
    assert Outbox.objects.count() == 0


def _raw_insert_sql(on_conflict: bool) -> str:
    suffix = " ON CONFLICT DO NOTHING" if on_conflict else ""
    return (
        'INSERT INTO outbox_outbox (watch_id, device_id, channel, "trigger", status,'
        " previous_status, reason, detail, detected_at, detected_payload, retry_count, attempts,"
        " next_attempt_at,"
        " claimed_by, created_at, updated_at) VALUES (%s, %s, 'console', 'target_price', 'pending',"
        " '', '', '', %s, '{}', 0, 0, %s, '', %s, %s)" + suffix
    )


def test_raw_sql_duplicates_are_folded_by_the_database():
    watch = WatchFactory()
    values = [
        connection.ops.adapt_datetimefield_value(dt.datetime(2026, 11, 29, h, 0, tzinfo=UTC))
        for h in (1, 2)
    ]

    def params(at):
        return [watch.pk, watch.device_id, at, values[0], values[0], values[0]]

    with connection.cursor() as cursor:
        cursor.execute(_raw_insert_sql(on_conflict=True), params(values[0]))
        assert cursor.rowcount == 1
        cursor.execute(_raw_insert_sql(on_conflict=True), params(values[1]))
        assert cursor.rowcount == 0
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_raw_insert_sql(on_conflict=False), params(values[1]))
    assert Outbox.objects.filter(watch=watch).count() == 1


@pytest.mark.django_db(transaction=True)
def test_plain_sqlite3_writer_gets_the_same_dedup(vendor):
    """A writer outside Django (no Django-registered SQL functions) is folded too."""
    if vendor != "sqlite":
        pytest.skip("plain sqlite3 writer: SQLite only")
    watch = WatchFactory()
    path = connection.settings_dict["NAME"]
    sql = _raw_insert_sql(on_conflict=False).replace("%s", "?")
    raw = sqlite3.connect(path, timeout=10)
    try:
        raw.execute(
            sql,
            [
                watch.pk,
                watch.device_id,
                "2026-11-29 14:00:00",
                "2026-11-29 14:00:00",
                "2026-11-29 14:00:00",
                "2026-11-29 14:00:00",
            ],
        )
        raw.commit()
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute(
                sql,
                [
                    watch.pk,
                    watch.device_id,
                    "2026-11-29 14:59:00",
                    "2026-11-29 14:00:00",
                    "2026-11-29 14:00:00",
                    "2026-11-29 14:00:00",
                ],
            )
        raw.rollback()
        raw.execute(
            sql,
            [
                watch.pk,
                watch.device_id,
                "2026-11-29 15:01:00",
                "2026-11-29 14:00:00",
                "2026-11-29 14:00:00",
                "2026-11-29 14:00:00",
            ],
        )
        raw.commit()
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        raw.close()
    assert Outbox.objects.filter(watch=watch).count() == 2


def test_constraint_is_reported_by_model_validation():
    from django.core.exceptions import ValidationError

    watch = WatchFactory()
    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    enqueue(watch, at, {})
    twin = Outbox(
        watch=watch,
        device=watch.device,
        channel="console",
        trigger=watch.trigger,
        detected_at=at + dt.timedelta(minutes=5),
        next_attempt_at=at,
    )
    with pytest.raises(ValidationError):
        twin.validate_constraints()
