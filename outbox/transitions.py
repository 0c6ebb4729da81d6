"""The outbox state machine: every status change goes through `transition`.

A transition moves rows to an `Outcome` (status, reason, detail, event data, column values):
one conditional UPDATE (`WHERE id IN (…) AND status IN (allowed-from) [AND claimed_by =
holder AND attempts = n]`) whose RETURNING rows say who won, plus one OutboxEvent per won row,
in the same transaction.

The fence of a claim is the pair (`claimed_by`, `attempts`): every claim writes a new holder
token and increments the row's attempt number, and a dispatcher records an outcome only while
the row still carries both values it claimed with. A dispatcher whose lease expired can
therefore never record over the one that took the row over — not even when the same holder
token claims the row again (a caller passing its own `holder` to every cycle), because that
later claim carries a higher attempt number.

On PostgreSQL every move first locks its rows lowest id first (`_lock_in_order`), whatever
the order its UPDATE then visits them in: two moves over overlapping rows wait for each
other in one order and cannot deadlock each other. A claim waits for no row at all
(`skip_locked`): a row another transaction holds is left to it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from common.counters import count_transition
from common.fields import concrete_field
from common.lookups import among, one_of
from outbox import sql
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
class Outcome:
    """Where one row goes and what the move records.

    `to` and `reason` are the row's new status and why; `detail` (written to the row and to
    its event) and `data` (the event's structured facts: the re-fetched value, the message,
    the HTTP status…) say more. `values` are further columns the move writes to the row —
    a value here wins over `reason` on the row, never on the event — and each column named in
    `increment` goes up by one in the database (`attempts = attempts + 1`).
    """

    to: Status
    reason: Reason | str = ""
    detail: str = ""
    data: Mapping[str, Any] | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    increment: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fence:
    """A claim's fence: a row moves only while it is still claimed by `holder` and, with
    `attempts`, still at the attempt number `attempts[id]` the claim gave it (a row missing
    from `attempts` never moves)."""

    holder: str
    attempts: Mapping[int, int] | None = None


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
    ids: Iterable[int],
    outcome: Outcome,
    *,
    expect: Iterable[Status] | None = None,
    fence: Fence | None = None,
    actor: str = "",
    now: dt.datetime | None = None,
    skip_locked: bool = False,
) -> list[int]:
    """Move the rows `ids` to the same `outcome`; see `transition_each`."""
    to = Status(outcome.to)
    check_allowed(to, expect if expect is not None else ALLOWED[to])
    return transition_each(
        dict.fromkeys(ids, outcome),
        expect=expect,
        fence=fence,
        actor=actor,
        now=now,
        skip_locked=skip_locked,
    )


def transition_each(
    outcomes: Mapping[int, Outcome],
    *,
    expect: Iterable[Status] | None = None,
    fence: Fence | None = None,
    actor: str = "",
    now: dt.datetime | None = None,
    skip_locked: bool = False,
) -> list[int]:
    """Move each row `id` of `outcomes` that is still in one of `expect` (default: every
    status allowed to reach its outcome's status) — and, with `fence`, still held by that
    claim — to its outcome. Returns the ids that moved, in one transaction.

    On PostgreSQL the rows are locked lowest id first before any is written; with
    `skip_locked` a row another transaction holds is not waited for and does not move.
    Rows going to the same status for the same reason share one conditional UPDATE per
    chunk; a column every row of the chunk gives the same value is a plain assignment, one
    that differs a CASE over the ids. `status`, `reason`, `detail` and `updated_at` are always
    written, and every moved row gets one OutboxEvent.
    """
    tos = {Status(outcome.to) for outcome in outcomes.values()}
    allowed = {to: check_allowed(to, expect if expect is not None else ALLOWED[to]) for to in tos}
    if not outcomes:
        return []
    now = now or timezone.now()
    moved: list[int] = []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            locked = _lock_in_order(
                outcomes, frozenset().union(*allowed.values()), fence, skip_locked=skip_locked
            )
            if skip_locked:
                outcomes = {row_id: outcomes[row_id] for row_id in locked}
        groups: dict[tuple[Status, str, tuple[str, ...]], list[int]] = defaultdict(list)
        for row_id, outcome in outcomes.items():
            groups[(Status(outcome.to), str(outcome.reason), outcome.increment)].append(row_id)
        for (to, reason, increment), ids in groups.items():
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                columns = _columns(chunk, outcomes, to, reason, now)
                won = _update_returning(chunk, columns, increment, allowed[to], fence)
                if won:
                    _write_events(won, outcomes, to, reason, actor, now)
                    count_transition(to, reason, len(won))
                moved.extend(row_id for row_id, _ in won)
    return moved


def transition_one(row_id: int, outcome: Outcome, **kwargs: Any) -> bool:
    """`transition` for one row. False when another process got there first; raises
    TransitionNotAllowed when the row is in a status the move is not allowed from."""
    if transition([row_id], outcome, **kwargs):
        return True
    current = Outbox.objects.filter(pk=row_id).values_list("status", flat=True).first()
    expect = kwargs.get("expect") or ALLOWED[Status(outcome.to)]
    if current is not None and current not in {Status(s) for s in expect}:
        raise TransitionNotAllowed(f"row {row_id} is {current}; cannot move to {outcome.to}")
    return False


def renew_lease(
    fence: Fence,
    now: dt.datetime,
    *,
    starting: Iterable[int] = (),
    digests: Mapping[int, Mapping[str, Any]] | None = None,
) -> set[int]:
    """The heartbeat of a claim: rows still `sending` under `fence` get `claimed_at = now`
    (their lease starts again), and those in `starting` also `attempt_started_at = now` (the
    intent, written before their delivery starts) and `attempt_digest` — the digest each
    goes out in (`digests`, by row id), or null for a row going alone. No status moves and
    no event is written. Returns the ids still held — a row missing was taken over and must
    not be delivered."""
    ids = sorted(fence.attempts or {})
    starting = set(starting)
    held: set[int] = set()
    if not ids:
        return held
    with transaction.atomic():
        if connection.vendor == "postgresql":
            _lock_in_order(ids, frozenset({Status.SENDING}), fence)
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            columns: dict[str, dict[int, Any]] = {"claimed_at": dict.fromkeys(chunk, now)}
            intent = {row_id: now for row_id in chunk if row_id in starting}
            if intent:
                columns["attempt_started_at"] = intent
                columns["attempt_digest"] = {
                    row_id: dict(digests[row_id]) if digests and row_id in digests else None
                    for row_id in intent
                }
            won = _update_returning(
                chunk, columns, (), frozenset({Status.SENDING}), fence, record_previous=False
            )
            held.update(row_id for row_id, _ in won)
    return held


def _lock_in_order(
    ids: Iterable[int],
    statuses: frozenset[Status],
    fence: Fence | None,
    *,
    skip_locked: bool = False,
) -> list[int]:
    """PostgreSQL, inside the caller's transaction: lock the rows of `ids` still in one of
    `statuses` (and, with `fence`, claimed by its holder), lowest id first — an UPDATE
    joined to its ids visits them in whatever order its plan chooses, and two that meet in
    opposite orders deadlock. With `skip_locked`, rows another transaction holds are left
    out instead of waited for. Returns the ids locked."""
    rows = Outbox.objects.filter(one_of("id", sorted(ids)), status__in=sorted(statuses))
    if fence is not None:
        rows = rows.filter(claimed_by=fence.holder)
    locking = rows.order_by("id").select_for_update(skip_locked=skip_locked)
    return list(locking.values_list("id", flat=True))


def _columns(
    ids: list[int], outcomes: Mapping[int, Outcome], to: Status, reason: str, now: dt.datetime
) -> dict[str, dict[int, Any]]:
    """column -> row id -> the value the move writes there."""
    columns: dict[str, dict[int, Any]] = {
        "status": dict.fromkeys(ids, to.value),
        "reason": dict.fromkeys(ids, reason),
        "detail": {row_id: outcomes[row_id].detail for row_id in ids},
        "updated_at": dict.fromkeys(ids, now),
    }
    for row_id in ids:
        for name, value in outcomes[row_id].values.items():
            columns.setdefault(name, {})[row_id] = value
    return columns


def _column(name: str) -> tuple[models.Field[Any, Any], str]:
    model_field = concrete_field(Outbox, name)
    return model_field, connection.ops.quote_name(model_field.column)


def _update_returning(
    ids: list[int],
    columns: Mapping[str, Mapping[int, Any]],
    increment: Iterable[str],
    expect: frozenset[Status],
    fence: Fence | None,
    *,
    record_previous: bool = True,
) -> list[tuple[int, str]]:
    db = connections[DEFAULT_DB_ALIAS]
    assignments: list[str] = []
    params: list[Any] = []
    # PostgreSQL: a column whose rows each have their own value is one array, joined by id —
    # a few parameters instead of a CASE of 2 × ids placeholders that psycopg (client-side
    # binding) and the server parse anew for every statement.
    arrays: list[tuple[str, list[Any]]] = [("bigint[]", ids)]
    for name, values in columns.items():
        model_field, column = _column(name)
        given = [values[row_id] for row_id in ids if row_id in values]
        if len(given) == len(ids) and all(value == given[0] for value in given):
            # One value for every row of the chunk (every `detail` of a sent batch is ""):
            # a plain assignment instead of a CASE over the ids.
            assignments.append(f"{column} = %s")
            params.append(_prep(model_field, given[0], db))
            continue
        if connection.vendor == "postgresql" and len(given) == len(ids):
            sql_type, elements, cast = _array(model_field, given)
            assignments.append(f"{column} = u.c{len(arrays)}{cast}")
            arrays.append((sql_type, elements))
            continue
        cases = []
        for row_id in ids:
            if row_id in values:
                cases.append("WHEN %s THEN %s")
                params.extend([row_id, _prep(model_field, values[row_id], db)])
        # Rows without a value of their own keep theirs.
        assignments.append(f"{column} = CASE id {' '.join(cases)} ELSE {column} END")
    for name in increment:
        _, column = _column(name)
        assignments.append(f"{column} = {column} + 1")
    source = ""
    if len(arrays) > 1:
        names = ", ".join(f"c{n}" for n in range(len(arrays)))
        source = f" FROM unnest({', '.join(f'%s::{t}' for t, _ in arrays)}) AS u({names})"
        params.extend(elements for _, elements in arrays)
        where = ["id = u.c0"]
    else:
        where = [among("id", ids, params, connection.vendor)]
    where.append(f"status IN ({', '.join(['%s'] * len(expect))})")
    params.extend(sorted(s.value for s in expect))
    if fence is not None:
        where.append("claimed_by = %s")
        params.append(fence.holder)
        if fence.attempts is not None:
            # The attempt number each row was claimed with; a row without one matches nothing.
            by_attempt: dict[int, list[int]] = defaultdict(list)
            for row_id in ids:
                if row_id in fence.attempts:
                    by_attempt[fence.attempts[row_id]].append(row_id)
            if not by_attempt:
                return []
            _, column = _column("attempts")
            # Grouped by attempt number (a batch's rows mostly share one): a few terms
            # rather than a CASE over every id.
            terms = []
            for attempt, fenced in by_attempt.items():
                params.append(attempt)
                fenced_sql = among("id", fenced, params, connection.vendor)
                terms.append(f"({column} = %s AND {fenced_sql})")
            where.append(f"({' OR '.join(terms)})")
    # Every right-hand side sees the row as it was, so `previous_status = status` keeps the
    # from-status for the event without a second, racy read.
    if record_previous:
        assignments.insert(0, "previous_status = status")
    statement = sql.conditional_update(
        connection.ops.quote_name(_TABLE), assignments, source, where
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return [(row[0], row[1]) for row in cursor.fetchall()]


def _array(model_field: models.Field[Any, Any], values: list[Any]) -> tuple[str, list[Any], str]:
    """A column's values as one PostgreSQL array parameter: (its type, its elements, the cast
    back for each element). JSON goes as text, as the ORM would write it, cast to jsonb."""
    if isinstance(model_field, models.JSONField):
        texts = [None if v is None else json.dumps(v, cls=model_field.encoder) for v in values]
        return "text[]", texts, "::jsonb"
    db = connections[DEFAULT_DB_ALIAS]
    elements = [_prep(model_field, value, db) for value in values]
    # `Field.cast_db_type` is Django's public API (what `Cast` uses); django-stubs lacks it.
    sql_type = model_field.cast_db_type(connection)  # type: ignore[attr-defined]
    return f"{sql_type}[]", elements, ""


def _prep(model_field: models.Field[Any, Any], value: Any, db: BaseDatabaseWrapper) -> Any:
    """`value` as the ORM saves it, on a connection looked up once (the `connection` proxy
    looks up the thread's connection on every access: a fifth of this module's time over a
    batch's values). JSON on SQLite is dumped here as Django's own adapter dumps it, without
    the per-value dispatch around it."""
    if isinstance(model_field, models.JSONField) and db.vendor == "sqlite":
        return None if value is None else json.dumps(value, cls=model_field.encoder)
    return model_field.get_db_prep_save(value, db)


def _write_events(
    won: list[tuple[int, str]],
    outcomes: Mapping[int, Outcome],
    to: Status,
    reason: str,
    actor: str,
    now: dt.datetime,
) -> None:
    """The events of the rows that moved, without the ORM (its bulk_create costs more in
    Python than the database spends on the rows): on PostgreSQL one INSERT over arrays, on
    SQLite one INSERT per event through executemany."""
    fields = [concrete_field(OutboxEvent, name) for name in _EVENT_COLUMNS]
    prep = {f.name: f for f in fields}
    data_field = prep["data"]
    assert isinstance(data_field, models.JSONField)  # OutboxEvent.data is declared one
    at = prep["at"].get_db_prep_save(now, connection)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(OutboxEvent._meta.db_table)
    data = [_event_data(outcomes[row_id]) for row_id, _ in won]
    if connection.vendor == "postgresql":
        # One statement over one JSON document of the events: a pipelined executemany still
        # sends, and psycopg composes, one INSERT per event; arrays of text (one per column)
        # had psycopg quote every element with a regular expression — a fifth of a cycle.
        records = json.dumps(
            [
                {
                    "id": row_id,
                    "from_status": from_status,
                    "detail": outcomes[row_id].detail,
                    "data": event_data,
                }
                for (row_id, from_status), event_data in zip(won, data, strict=True)
            ],
            cls=data_field.encoder,
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql.events_from_json(table, columns), [to.value, reason, actor, at, records]
            )
        return
    db = connections[DEFAULT_DB_ALIAS]
    params = [
        (
            row_id,
            from_status,
            to.value,
            reason,
            outcomes[row_id].detail,
            _prep(data_field, values, db),
            actor,
            at,
        )
        for (row_id, from_status), values in zip(won, data, strict=True)
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql.insert_row(table, columns, len(fields)), params)


def _event_data(outcome: Outcome) -> dict[str, Any] | None:
    return dict(outcome.data) if outcome.data is not None else None


_EVENT_COLUMNS = ("outbox", "from_status", "to_status", "reason", "detail", "data", "actor", "at")
