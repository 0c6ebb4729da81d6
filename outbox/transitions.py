"""The outbox state machine: every status change goes through `transition`.

A transition is one conditional UPDATE (`WHERE id IN (…) AND status IN (allowed-from)
[AND claimed_by = holder AND attempts = n]`) whose RETURNING rows say who won, plus one
OutboxEvent per won row, in the same transaction.

The fence of a claim is the pair (`claimed_by`, `attempts`): every claim writes a new holder
token and increments the row's attempt number, and a dispatcher records an outcome only while
the row still carries both values it claimed with. A dispatcher whose lease expired can
therefore never record over the one that took the row over — not even when the same holder
token claims the row again (a caller passing its own `holder` to every cycle), because that
later claim carries a higher attempt number.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from monitoring.counters import count_transition
from outbox.models import Outbox, OutboxEvent, Reason, Status

# to-status -> statuses it may be reached from
ALLOWED: dict[Status, frozenset[Status]] = {
    Status.SENDING: frozenset({Status.PENDING, Status.RETRY}),
    Status.SENT: frozenset({Status.SENDING}),
    # pending/retry: staff drop or a listing paused; sending: a guard or re-check failed
    Status.DROPPED: frozenset({Status.PENDING, Status.RETRY, Status.SENDING}),
    # sending: transient failure; retry: staff "retry now" (due again, stays retry)
    Status.RETRY: frozenset({Status.SENDING, Status.RETRY}),
    Status.FAILED: frozenset({Status.SENDING, Status.RETRY}),
    # staff requeue of failed/retry rows
    Status.PENDING: frozenset({Status.FAILED, Status.RETRY}),
}

# SQLite accepts 32,766 parameters; PostgreSQL 65,535. Keep each statement well inside.
_CHUNK = 400

_TABLE = Outbox._meta.db_table


class TransitionNotAllowed(Exception):
    """Asked for a move the state machine does not have (a bug in the caller)."""


@dataclass(frozen=True)
class EventInfo:
    """What the event of one row records beyond from/to/reason."""

    detail: str = ""
    data: Mapping[str, Any] | None = None


def check_allowed(to: Status, expect: Iterable[Status]) -> frozenset[Status]:
    allowed = ALLOWED.get(Status(to))
    if allowed is None:
        raise TransitionNotAllowed(f"nothing may move to {to}")
    expect = frozenset(Status(s) for s in expect)
    if not expect or not expect <= allowed:
        bad = ", ".join(sorted(expect - allowed)) or "(nothing)"
        raise TransitionNotAllowed(f"{bad} → {to} is not a transition of the outbox")
    return expect


def transition(
    ids: Sequence[int],
    *,
    to: Status,
    reason: Reason | str = "",
    expect: Iterable[Status] | None = None,
    holder: str | None = None,
    attempts: Mapping[int, int] | None = None,
    set_fields: Mapping[str, Any] | None = None,
    per_row: Mapping[str, Mapping[int, Any]] | None = None,
    increment: Iterable[str] = (),
    events: Mapping[int, EventInfo] | None = None,
    detail: str = "",
    actor: str = "",
    now: dt.datetime | None = None,
) -> list[int]:
    """Move the rows `ids` that are still in one of `expect` (default: every status allowed to
    reach `to`) — and, with `holder`, still claimed by it; with `attempts`, still at the
    attempt number `attempts[id]` (a row missing from it never moves) — to `to`. Returns the
    ids that moved.

    `set_fields` are written to every moved row; `per_row[field][id]` only to that row;
    each field named in `increment` goes up by one in the database (`attempts = attempts + 1`).
    `status`, `reason`, `detail` and `updated_at` are always written.
    """
    expect_set = check_allowed(to, expect if expect is not None else ALLOWED[Status(to)])
    if not ids:
        return []
    now = now or timezone.now()
    common: dict[str, Any] = {
        "status": Status(to).value,
        "reason": str(reason),
        "detail": detail,
        "updated_at": now,
        **(set_fields or {}),
    }
    per_row = per_row or {}
    won: list[tuple[int, str]] = []
    with transaction.atomic():
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            won.extend(
                _update_returning(chunk, common, per_row, increment, expect_set, holder, attempts)
            )
        if won:
            _write_events(won, to, str(reason), detail, events or {}, actor, now)
            count_transition(to, reason, len(won))
    return [row_id for row_id, _ in won]


def transition_one(row_id: int, **kwargs: Any) -> bool:
    """`transition` for one row. False when another process got there first; raises
    TransitionNotAllowed when the row is in a status the move is not allowed from."""
    if transition([row_id], **kwargs):
        return True
    current = Outbox.objects.filter(pk=row_id).values_list("status", flat=True).first()
    expect = kwargs.get("expect") or ALLOWED[Status(kwargs["to"])]
    if current is not None and current not in {Status(s) for s in expect}:
        raise TransitionNotAllowed(f"row {row_id} is {current}; cannot move to {kwargs['to']}")
    return False


def _column(field_name: str):
    field = Outbox._meta.get_field(field_name)
    return field, connection.ops.quote_name(field.column)


def _update_returning(
    ids: list[int],
    common: Mapping[str, Any],
    per_row: Mapping[str, Mapping[int, Any]],
    increment: Iterable[str],
    expect: frozenset[Status],
    holder: str | None,
    attempts: Mapping[int, int] | None,
) -> list[tuple[int, str]]:
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in common.items():
        if name in per_row:
            continue
        field, column = _column(name)
        assignments.append(f"{column} = %s")
        params.append(field.get_db_prep_save(value, connection))
    for name in increment:
        _, column = _column(name)
        assignments.append(f"{column} = {column} + 1")
    for name, values in per_row.items():
        field, column = _column(name)
        given = [values[row_id] for row_id in ids if row_id in values]
        if len(given) == len(ids) and all(value == given[0] for value in given):
            # One value for every row of the chunk (every `detail` of a sent batch is ""):
            # a plain assignment instead of a CASE over the ids.
            assignments.append(f"{column} = %s")
            params.append(field.get_db_prep_save(given[0], connection))
            continue
        cases = []
        for row_id in ids:
            if row_id in values:
                cases.append("WHEN %s THEN %s")
                params.extend([row_id, field.get_db_prep_save(values[row_id], connection)])
        if not cases:
            continue
        # Rows without a per-row value keep the common one, or their own.
        fallback = "%s" if name in common else column
        if name in common:
            params.append(field.get_db_prep_save(common[name], connection))
        assignments.append(f"{column} = CASE id {' '.join(cases)} ELSE {fallback} END")
    where = [
        f"id IN ({', '.join(['%s'] * len(ids))})",
        f"status IN ({', '.join(['%s'] * len(expect))})",
    ]
    params.extend(ids)
    params.extend(sorted(s.value for s in expect))
    if holder is not None:
        where.append("claimed_by = %s")
        params.append(holder)
    if attempts is not None:
        # The attempt number each row was claimed with; a row without one matches nothing.
        fenced = [row_id for row_id in ids if row_id in attempts]
        if not fenced:
            return []
        _, column = _column("attempts")
        where.append(f"{column} = CASE id {' '.join(['WHEN %s THEN %s'] * len(fenced))} END")
        for row_id in fenced:
            params.extend([row_id, attempts[row_id]])
    # Every right-hand side sees the row as it was, so `previous_status = status` keeps the
    # from-status for the event without a second, racy read.
    assignments.insert(0, "previous_status = status")
    # Only quoted identifiers and placeholders are formatted in; every value is a parameter.
    sql = (
        f"UPDATE {connection.ops.quote_name(_TABLE)} SET {', '.join(assignments)} "  # noqa: S608
        f"WHERE {' AND '.join(where)} RETURNING id, previous_status"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _write_events(
    won: list[tuple[int, str]],
    to: Status,
    reason: str,
    detail: str,
    events: Mapping[int, EventInfo],
    actor: str,
    now: dt.datetime,
) -> None:
    """One INSERT per event through executemany: the ORM's bulk_create costs more in Python
    than the database spends on the rows."""
    fields = [OutboxEvent._meta.get_field(name) for name in _EVENT_COLUMNS]
    prep = {f.name: f for f in fields}
    at = prep["at"].get_db_prep_save(now, connection)
    params = []
    for row_id, from_status in won:
        info = events.get(row_id)
        data = dict(info.data) if info and info.data is not None else None
        params.append(
            (
                row_id,
                from_status,
                Status(to).value,
                reason,
                info.detail if info and info.detail else detail,
                prep["data"].get_db_prep_save(data, connection),
                actor,
                at,
            )
        )
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(OutboxEvent._meta.db_table)
    placeholders = ", ".join(["%s"] * len(fields))
    with connection.cursor() as cursor:
        cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({placeholders})", params)  # noqa: S608


_EVENT_COLUMNS = ("outbox", "from_status", "to_status", "reason", "detail", "data", "actor", "at")
