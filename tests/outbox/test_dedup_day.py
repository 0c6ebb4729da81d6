"""The dedup day, exact to the microsecond on both databases, for `enqueue()` and for writers
outside Django; and on SQLite, a detected_at the day cannot read is refused by the database."""

from __future__ import annotations

import datetime as dt
import sqlite3
import zoneinfo

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox.enqueue import enqueue
from outbox.expressions import LocalDate
from outbox.models import DEDUP_ZONE, Outbox
from tests.factories import WatchFactory

UTC = dt.UTC
TOKYO = zoneinfo.ZoneInfo(DEDUP_ZONE)
# 23:59:59.999999 and 00:00:00 in Tokyo: the last microsecond of a day and the next day's first.
LAST = dt.datetime(2026, 11, 29, 14, 59, 59, 999999, tzinfo=UTC)
NEXT = dt.datetime(2026, 11, 29, 15, 0, 0, 0, tzinfo=UTC)
EARLIER_SAME_DAY = dt.datetime(2026, 11, 29, 3, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db

COLUMNS = (
    'watch_id, device_id, channel, "trigger", status, previous_status, reason, detail,'
    " detected_at, detected_payload, retry_count, attempts, next_attempt_at, claimed_by,"
    " created_at, updated_at"
)
VALUES = (
    "{p}, {p}, 'console', 'target_price', 'pending', '', '', '', {p}, '{{}}', 0, 0, {p}, '',"
    " {p}, {p}"
)


def insert_sql(placeholder: str) -> str:
    values = VALUES.format(p=placeholder)
    return f"INSERT INTO outbox_outbox ({COLUMNS}) VALUES ({values})"


def days(watch) -> list[dt.date]:
    """The day the database dates each of the watch's rows to."""
    rows = Outbox.objects.filter(watch=watch).annotate(
        day=LocalDate("detected_at", zone=DEDUP_ZONE)
    )
    return sorted(rows.values_list("day", flat=True))


# --- enqueue(), on whichever database the suite runs ----------------------------------------


def test_enqueue_folds_the_last_microsecond_of_a_day_into_that_day():
    watch = WatchFactory()
    assert enqueue(watch, EARLIER_SAME_DAY, {"price": 900}) is True
    assert enqueue(watch, LAST, {"price": 880}) is False
    assert days(watch) == [dt.date(2026, 11, 29)]


def test_enqueue_takes_the_next_days_first_microsecond_after_the_last_one():
    watch = WatchFactory()
    assert enqueue(watch, LAST, {"price": 900}) is True
    assert enqueue(watch, NEXT, {"price": 880}) is True
    assert days(watch) == [dt.date(2026, 11, 29), dt.date(2026, 11, 30)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    second=st.integers(min_value=-3, max_value=2),
    microsecond=st.integers(min_value=0, max_value=999_999),
)
def test_the_databases_day_is_pythons_tokyo_day_near_midnight(second, microsecond):
    moment = NEXT + dt.timedelta(seconds=second, microseconds=microsecond)
    watch = WatchFactory()
    with transaction.atomic():
        enqueue(watch, moment, {})
        assert days(watch) == [moment.astimezone(TOKYO).date()]
        transaction.set_rollback(True)


# --- A plain sqlite3 writer ------------------------------------------------------------------


@pytest.fixture
def sqlite_writer(vendor):
    if vendor != "sqlite":
        pytest.skip("a plain sqlite3 writer: SQLite only")
    raw = sqlite3.connect(connection.settings_dict["NAME"], timeout=10)
    yield raw
    raw.close()


def write(raw: sqlite3.Connection, watch, detected_at) -> None:
    now = "2026-11-29 00:00:00"
    try:
        raw.execute(insert_sql("?"), [watch.pk, watch.device_id, detected_at, now, now, now])
        raw.commit()
    except sqlite3.Error:
        raw.rollback()
        raise


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("last", "next_day"),
    [
        ("2026-11-29 14:59:59.999999", "2026-11-29 15:00:00.000000"),  # Django's own text
        ("2026-11-29 14:59:59.9995", "2026-11-29 15:00:00"),
        ("2026-11-29T14:59:59.999999Z", "2026-11-29T15:00:00Z"),
        ("2026-11-29 23:59:59.999999+09:00", "2026-11-30 00:00:00+09:00"),
        ("2026-11-29 14:59:59.999999999", "2026-11-29 15:00:00.000000001"),  # nanoseconds
    ],
)
def test_a_plain_sqlite3_writer_gets_the_day_to_the_microsecond(sqlite_writer, last, next_day):
    watch = WatchFactory()
    write(sqlite_writer, watch, "2026-11-29 03:00:00")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        write(sqlite_writer, watch, last)
    write(sqlite_writer, watch, next_day)
    assert days(watch) == [dt.date(2026, 11, 29), dt.date(2026, 11, 30)]
    # Django reads each stored text as the instant the day was taken from.
    read = sorted(Outbox.objects.filter(watch=watch).values_list("detected_at", flat=True))
    assert read[1].astimezone(TOKYO).date() == dt.date(2026, 11, 30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "unreadable",
    [
        "yesterday",
        "",
        20261129,  # an integer: SQLite's date() takes it for a Julian day number
        2461009.5,
        "2461009.5",  # the same as text
        "15:00:00",  # a time with no date
        "2026-11-29",  # a date with no time
        "2026-02-31 10:00:00",  # no such day
        "2026-11-29 24:00:00",
        "2026-11-29 15:00",
        "0000-11-29 15:00:00",
        "2026-11-29 15:00:00.",  # a point with no fraction
        "2026-11-29 15:00:00.5.5",
        "2026-11-29 15:00:001",
        "2026-11-29 15:00:00.1234567890123",  # a fraction longer than Django reads
        "2026-11-29 15:00:00+0900",  # an offset SQLite does not read
        "2026-11-29 15:00:00+15:00",
        "2026-11-29 15:00:00 UTC",
        b"2026-11-29 15:00:00",  # a blob
    ],
)
def test_a_plain_sqlite3_writer_cannot_store_a_time_the_day_cannot_read(sqlite_writer, unreadable):
    watch = WatchFactory()
    with pytest.raises(sqlite3.IntegrityError, match="outbox_detected_at_is_a_time"):
        write(sqlite_writer, watch, unreadable)
    assert not Outbox.objects.filter(watch=watch).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "readable",
    [
        "2026-11-29 15:00:00",
        "2026-11-29 15:00:00.5",
        "2026-11-29 15:00:00.123456",
        "2026-11-29T15:00:00.123456789",
        "2026-11-29 15:00:00Z",
        "2026-11-30 00:00:00.5+09:00",
        "2026-11-29 10:00:00-05:00",
    ],
)
def test_a_plain_sqlite3_writer_may_store_any_time_django_reads_the_same(sqlite_writer, readable):
    watch = WatchFactory()
    write(sqlite_writer, watch, readable)
    (row,) = Outbox.objects.filter(watch=watch)
    assert row.detected_at.astimezone(TOKYO).date() == dt.date(2026, 11, 30)
    assert days(watch) == [dt.date(2026, 11, 30)]


# --- A plain psycopg writer ------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("last", "next_day"),
    [
        ("2026-11-29 14:59:59.999999+00", "2026-11-29 15:00:00.000000+00"),
        ("2026-11-29 23:59:59.999999+09:00", "2026-11-30 00:00:00+09:00"),
    ],
)
def test_a_plain_psycopg_writer_gets_the_day_to_the_microsecond(last, next_day):
    import psycopg

    watch = WatchFactory()
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"],
        user=db["USER"],
        password=db["PASSWORD"],
        host=db["HOST"],
        port=db["PORT"],
    ) as raw:
        now = "2026-11-29 00:00:00+00"
        sql = insert_sql("%s")
        raw.execute(sql, [watch.pk, watch.device_id, "2026-11-29 03:00:00+00", now, now, now])
        raw.commit()
        with pytest.raises(psycopg.errors.UniqueViolation):
            raw.execute(sql, [watch.pk, watch.device_id, last, now, now, now])
        raw.rollback()
        raw.execute(sql, [watch.pk, watch.device_id, next_day, now, now, now])
        raw.commit()
    assert days(watch) == [dt.date(2026, 11, 29), dt.date(2026, 11, 30)]


def test_a_row_django_validates_passes_the_check_as_a_parameter():
    """Model validation evaluates the CHECK with the value as a parameter, not the column."""
    watch = WatchFactory()
    row = Outbox(
        watch=watch,
        device=watch.device,
        channel="console",
        trigger=watch.trigger,
        detected_at=LAST,
        next_attempt_at=LAST,
    )
    row.validate_constraints()
