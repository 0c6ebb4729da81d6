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
import functools
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Exists, OuterRef, Q

from outbox.models import DUE_STATUSES, Outbox, Status

_TABLE = Outbox._meta.db_table

# (id, watch id, channel, detected_at) of a due row
DueRow = tuple[int, int, str, dt.datetime]
# …and whether its watch and channel have other due rows (a backlog to supersede)
Candidate = tuple[int, int, str, dt.datetime, bool]
# …and whether it was sent
Sibling = tuple[int, int, str, dt.datetime, bool]


def _sqlite(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _literal_statuses(statuses) -> str:
    # Status values are our own TextChoices constants, never user input.
    return ", ".join(f"'{Status(s).value}'" for s in statuses)


def select_due(now: dt.datetime, limit: int) -> list[Candidate]:
    """Up to `limit` due rows, oldest first, leaving out every watch and channel that has a
    row in flight (`sending`: the one-in-flight index would refuse its claim), each with
    whether its watch and channel have other due rows. Call inside the claim's transaction:
    on PostgreSQL the rows stay locked (others skip them) until it ends. A backlog is other
    due rows, or a row already sent for a detection at least as new."""
    if connection.vendor == "sqlite":
        moment = connection.ops.adapt_datetimefield_value(now)
        rows = _sqlite(
            "SELECT id, watch_id, channel, detected_at, "  # noqa: S608
            f"EXISTS (SELECT 1 FROM {_TABLE} AS other INDEXED BY {_watch_index()} "
            "WHERE other.watch_id = due.watch_id AND other.channel = due.channel "
            f"AND other.id != due.id AND ((other.status IN ({_literal_statuses(DUE_STATUSES)}) "
            "AND other.next_attempt_at <= %s) OR (other.status = "
            f"{_literal_statuses([Status.SENT])} AND other.detected_at >= due.detected_at))) "
            f"FROM {_TABLE} AS due INDEXED BY outbox_due "
            f"WHERE status IN ({_literal_statuses(DUE_STATUSES)}) AND next_attempt_at <= %s "
            f"AND NOT EXISTS (SELECT 1 FROM {_TABLE} AS flying "
            "WHERE flying.watch_id = due.watch_id AND flying.channel = due.channel "
            f"AND flying.status = {_literal_statuses([Status.SENDING])}) "
            "ORDER BY next_attempt_at, id LIMIT %s",
            [moment, moment, limit],
        )
        return [(*_due_row(row[:4]), bool(row[4])) for row in rows]
    key = {"watch_id": OuterRef("watch_id"), "channel": OuterRef("channel")}
    in_flight = Outbox.objects.filter(**key, status=Status.SENDING)
    siblings = Outbox.objects.filter(
        Q(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        | Q(status=Status.SENT, detected_at__gte=OuterRef("detected_at")),
        **key,
    ).exclude(id=OuterRef("id"))
    due = (
        Outbox.objects.filter(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        .exclude(Exists(in_flight))
        .annotate(backlog=Exists(siblings))
        .order_by("next_attempt_at", "id")
        .select_for_update(skip_locked=True)
    )
    return list(due.values_list("id", "watch_id", "channel", "detected_at", "backlog")[:limit])


def select_due_siblings(now: dt.datetime, watch_ids: list[int]) -> list[Sibling]:
    """Every due row of these watches, and every sent one (all channels; the caller keys by
    channel), so a claim sees a watch's whole backlog — not only the rows that fell into its
    batch — and what of it was already told. Read through the watch index; not locked: the
    claim's conditional UPDATE decides who wins a row."""
    rows: Iterable[tuple[Any, ...]]
    if connection.vendor == "sqlite":
        # Left to itself, SQLite's planner reads every due row through the status index.
        rows = _sqlite(
            f"SELECT id, watch_id, channel, detected_at, status FROM {_TABLE} "  # noqa: S608
            f"INDEXED BY {_watch_index()} "
            f"WHERE watch_id IN ({', '.join(['%s'] * len(watch_ids))}) "
            f"AND ((status IN ({_literal_statuses(DUE_STATUSES)}) AND next_attempt_at <= %s) "
            f"OR status = {_literal_statuses([Status.SENT])})",
            [*watch_ids, connection.ops.adapt_datetimefield_value(now)],
        )
    else:
        # Not locked, and not skipping locked rows: a backlog row another dispatcher holds
        # still counts when choosing the newest (claiming an older one would be a second
        # notification once the newest goes out).
        rows = Outbox.objects.filter(
            Q(status__in=DUE_STATUSES, next_attempt_at__lte=now) | Q(status=Status.SENT),
            watch_id__in=watch_ids,
        ).values_list("id", "watch_id", "channel", "detected_at", "status")
    return [(*_due_row(row[:4]), row[4] == Status.SENT) for row in rows]


@functools.cache
def _watch_index() -> str:
    """The name of the index Django made for the `watch` foreign key (a hash of its own)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, _TABLE)
    return next(
        name
        for name, info in constraints.items()
        if info["index"] and info["columns"] == ["watch_id"] and not info["unique"]
    )


def _due_row(row: tuple) -> DueRow:
    row_id, watch_id, channel, detected_at = row
    if isinstance(detected_at, str):  # raw SQLite: Django's naive UTC text…
        detected_at = dt.datetime.fromisoformat(detected_at)
    if detected_at.tzinfo is None:  # …or its converter's naive datetime
        detected_at = detected_at.replace(tzinfo=dt.UTC)
    return row_id, watch_id, channel, detected_at


def select_expired(cutoff: dt.datetime) -> list[tuple[int, int, str, object]]:
    """(id, retry_count, claimed_by, attempt_started_at) of `sending` rows claimed before
    `cutoff` (attempt_started_at only for whether it is set)."""
    if connection.vendor == "sqlite":
        return _sqlite(
            "SELECT id, retry_count, claimed_by, attempt_started_at "  # noqa: S608
            f"FROM {_TABLE} INDEXED BY outbox_sending "
            f"WHERE status = {_literal_statuses([Status.SENDING])} AND claimed_at < %s ORDER BY id",
            [connection.ops.adapt_datetimefield_value(cutoff)],
        )
    expired = (
        Outbox.objects.filter(status=Status.SENDING, claimed_at__lt=cutoff)
        .order_by("id")
        .select_for_update(skip_locked=True)
    )
    return list(expired.values_list("id", "retry_count", "claimed_by", "attempt_started_at"))
