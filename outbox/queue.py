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
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import Exists, OuterRef, Q

from outbox import sql
from outbox.models import DUE_STATUSES, Outbox, Status


class DueRow(NamedTuple):
    """A row of the queue as a claim reads it."""

    id: int
    watch_id: int
    channel: str
    detected_at: dt.datetime

    @property
    def key(self) -> tuple[int, str]:
        """Its watch and channel: one notification of them may be in flight."""
        return self.watch_id, self.channel

    @property
    def order(self) -> tuple[dt.datetime, int]:
        """Newer detections last (the id breaks a tie)."""
        return self.detected_at, self.id


class Candidate(NamedTuple):
    """A due row, and whether its watch and channel have other due rows, or a sent one or a
    waiting one (`pending`/`retry`, not yet due) at least as new (a backlog to supersede)."""

    row: DueRow
    backlog: bool


class Sibling(NamedTuple):
    """A row of a watch with a backlog, its status (`pending`/`retry`, `sending` or `sent`)
    and, for the first two, whether it is due yet."""

    row: DueRow
    status: str
    due: bool


class Expired(NamedTuple):
    """A `sending` row whose lease expired."""

    id: int
    retry_count: int
    claimed_by: str
    attempt_started_at: Any  # only whether it is set is read


def _sqlite(statement: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()


def select_due(now: dt.datetime, limit: int) -> list[Candidate]:
    """Up to `limit` due rows, oldest first, leaving out every watch and channel that has a
    row in flight (`sending`: the one-in-flight index would refuse its claim), each with
    whether its watch and channel have other due rows. Call inside the claim's transaction:
    on PostgreSQL the rows stay locked (others skip them) until it ends. A backlog is other
    due rows, or a row already sent, or waiting for its retry, for a detection at least as
    new."""
    if connection.vendor == "sqlite":
        moment = connection.ops.adapt_datetimefield_value(now)
        rows = _sqlite(sql.due_rows_sqlite(_watch_index()), [moment, moment, limit])
        return [Candidate(_due_row(row[:4]), bool(row[4])) for row in rows]
    key = {"watch_id": OuterRef("watch_id"), "channel": OuterRef("channel")}
    in_flight = Outbox.objects.filter(**key, status=Status.SENDING)
    siblings = Outbox.objects.filter(
        Q(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        | Q(
            status__in=[*DUE_STATUSES, Status.SENT],
            detected_at__gte=OuterRef("detected_at"),
        ),
        **key,
    ).exclude(id=OuterRef("id"))
    due = (
        Outbox.objects.filter(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        .exclude(Exists(in_flight))
        .annotate(backlog=Exists(siblings))
        .order_by("next_attempt_at", "id")
        .select_for_update(skip_locked=True)
    )
    found = due.values_list("id", "watch_id", "channel", "detected_at", "backlog")[:limit]
    return [Candidate(_due_row(row[:4]), bool(row[4])) for row in found]


def select_due_siblings(now: dt.datetime, watch_ids: list[int]) -> list[Sibling]:
    """Every row of these watches that is due or waiting for its retry, every one in flight
    and every sent one (all channels; the caller keys by channel), so a claim sees a watch's
    whole backlog — not only the rows that fell into its batch — and what of it is being,
    was already or will be told. A row in flight counts: it may be sent between this read
    and the claim's UPDATE, which the in-flight index would then no longer stop. So does a
    newer detection waiting for its retry: it goes out when due, and an older row sent
    before it would tell the same news twice. Read through the watch index; not locked: the
    claim's conditional UPDATE decides who wins a row."""
    rows: Iterable[tuple[Any, ...]]
    if connection.vendor == "sqlite":
        # Left to itself, SQLite's planner reads every due row through the status index.
        rows = _sqlite(
            sql.due_siblings_sqlite(_watch_index(), len(watch_ids)),
            [connection.ops.adapt_datetimefield_value(now), *watch_ids],
        )
    else:
        # Not locked, and not skipping locked rows: a backlog row another dispatcher holds
        # still counts when choosing the newest (claiming an older one would be a second
        # notification once the newest goes out).
        rows = (
            Outbox.objects.filter(
                status__in=[*DUE_STATUSES, Status.SENDING, Status.SENT], watch_id__in=watch_ids
            )
            .annotate(due=Q(next_attempt_at__lte=now))
            .values_list("id", "watch_id", "channel", "detected_at", "status", "due")
        )
    return [Sibling(_due_row(row[:4]), row[4], bool(row[5])) for row in rows]


@functools.cache
def _watch_index() -> str:
    """The name of the index Django made for the `watch` foreign key (a hash of its own)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, sql.TABLE)
    return next(
        name
        for name, info in constraints.items()
        if info["index"] and info["columns"] == ["watch_id"] and not info["unique"]
    )


def _due_row(row: tuple[Any, ...]) -> DueRow:
    row_id, watch_id, channel, detected_at = row
    if isinstance(detected_at, str):  # raw SQLite: Django's naive UTC text…
        detected_at = dt.datetime.fromisoformat(detected_at)
    if detected_at.tzinfo is None:  # …or its converter's naive datetime
        detected_at = detected_at.replace(tzinfo=dt.UTC)
    return DueRow(row_id, watch_id, channel, detected_at)


def select_expired(cutoff: dt.datetime) -> list[Expired]:
    """(id, retry_count, claimed_by, attempt_started_at) of `sending` rows claimed before
    `cutoff` (attempt_started_at only for whether it is set)."""
    if connection.vendor == "sqlite":
        moment = connection.ops.adapt_datetimefield_value(cutoff)
        return [Expired(*row) for row in _sqlite(sql.expired_leases_sqlite(), [moment])]
    expired = (
        Outbox.objects.filter(status=Status.SENDING, claimed_at__lt=cutoff)
        .order_by("id")
        .select_for_update(skip_locked=True)
    )
    rows = expired.values_list("id", "retry_count", "claimed_by", "attempt_started_at")
    return [Expired(*row) for row in rows]
