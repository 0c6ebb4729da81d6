"""The two queue reads of the dispatcher, each answered from its partial index.

SQLite uses a partial index only when the query's WHERE clause names the index's condition
with the same literals, and Django passes `status IN (%s, %s)` as parameters; its planner also
prefers the wider (status, reason, updated_at) index when it has no statistics. So on SQLite
these reads are written out with literal statuses and `INDEXED BY`, and the due rows are read
in index order, stopping at the limit, however many terminal rows or not-yet-due retries the
table holds (~80x faster than a sort behind 60,000 waiting retries: bench_queue_scale.py).
PostgreSQL gets the ORM query with `FOR UPDATE SKIP LOCKED` (Django binds
parameters client-side, so its planner sees the literals and picks the partial index).
"""

from __future__ import annotations

import datetime as dt

from django.db import connection

from outbox.models import DUE_STATUSES, Outbox, Status

_TABLE = Outbox._meta.db_table


def _sqlite(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _literal_statuses(statuses) -> str:
    # Status values are our own TextChoices constants, never user input.
    return ", ".join(f"'{Status(s).value}'" for s in statuses)


def select_due(now: dt.datetime, limit: int) -> list[int]:
    """The ids of up to `limit` due rows, oldest first. Call inside the claim's
    transaction: on PostgreSQL the rows stay locked (others skip them) until it ends."""
    if connection.vendor == "sqlite":
        rows = _sqlite(
            f"SELECT id FROM {_TABLE} INDEXED BY outbox_due "  # noqa: S608
            f"WHERE status IN ({_literal_statuses(DUE_STATUSES)}) AND next_attempt_at <= %s "
            "ORDER BY next_attempt_at, id LIMIT %s",
            [connection.ops.adapt_datetimefield_value(now), limit],
        )
        return [row_id for (row_id,) in rows]
    due = (
        Outbox.objects.filter(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .select_for_update(skip_locked=True)
    )
    return list(due.values_list("id", flat=True)[:limit])


def select_expired(cutoff: dt.datetime) -> list[tuple[int, int, str]]:
    """(id, retry_count, claimed_by) of `sending` rows claimed before `cutoff`."""
    if connection.vendor == "sqlite":
        return _sqlite(
            f"SELECT id, retry_count, claimed_by FROM {_TABLE} INDEXED BY outbox_sending "  # noqa: S608
            f"WHERE status = {_literal_statuses([Status.SENDING])} AND claimed_at < %s ORDER BY id",
            [connection.ops.adapt_datetimefield_value(cutoff)],
        )
    expired = (
        Outbox.objects.filter(status=Status.SENDING, claimed_at__lt=cutoff)
        .order_by("id")
        .select_for_update(skip_locked=True)
    )
    return list(expired.values_list("id", "retry_count", "claimed_by"))
