"""The outbox's hand-written SQL, each statement named for its query. Only what the ORM cannot
say is here: reads SQLite must be told which index to use and given the statuses as literals
(so it uses a partial index), the conditional UPDATE … RETURNING every transition is, the
events written with it in one statement, and INSERT … ON CONFLICT DO NOTHING for an
idempotent enqueue. Everything else in `outbox` is the ORM as documented
(docs/decisions/0048-plain-django-over-benchmark-speed.md).

Only the model's own table, column and index names and our own status constants are formatted
in; every value goes in as a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable

from outbox.models import DUE_STATUSES, Outbox, Status

TABLE = Outbox._meta.db_table


def literal_statuses(statuses: Iterable[str]) -> str:
    """Our own TextChoices constants as SQL literals (never user input): SQLite uses a
    partial index only when a query names its condition with the same literals."""
    return ", ".join(f"'{Status(s).value}'" for s in statuses)


def due_rows_sqlite(watch_index: str) -> str:
    """Due rows, oldest first, from the `outbox_due` index, leaving out every watch and
    channel with a row in flight, each with whether its watch and channel have a backlog.
    Parameters: now, now, limit."""
    due = literal_statuses(DUE_STATUSES)
    return (
        "SELECT id, watch_id, channel, detected_at, "  # noqa: S608
        f"EXISTS (SELECT 1 FROM {TABLE} AS other INDEXED BY {watch_index} "
        "WHERE other.watch_id = due.watch_id AND other.channel = due.channel "
        f"AND other.id != due.id AND ((other.status IN ({due}) "
        "AND other.next_attempt_at <= %s) OR (other.status IN "
        f"({literal_statuses([*DUE_STATUSES, Status.SENT])}) "
        "AND other.detected_at >= due.detected_at))) "
        f"FROM {TABLE} AS due INDEXED BY outbox_due "
        f"WHERE status IN ({due}) AND next_attempt_at <= %s "
        f"AND NOT EXISTS (SELECT 1 FROM {TABLE} AS flying "
        "WHERE flying.watch_id = due.watch_id AND flying.channel = due.channel "
        f"AND flying.status = {literal_statuses([Status.SENDING])}) "
        "ORDER BY next_attempt_at, id LIMIT %s"
    )


def due_siblings_sqlite(watch_index: str, watches: int) -> str:
    """Every row of `watches` watches that is due or waiting for its retry, with whether it
    is due, every one in flight and every sent one, through the watch index.
    Parameters: now, then each watch id."""
    statuses = literal_statuses([*DUE_STATUSES, Status.SENDING, Status.SENT])
    return (
        "SELECT id, watch_id, channel, detected_at, status, "  # noqa: S608
        f"next_attempt_at <= %s FROM {TABLE} INDEXED BY {watch_index} "
        f"WHERE watch_id IN ({', '.join(['%s'] * watches)}) AND status IN ({statuses})"
    )


def expired_leases_sqlite() -> str:
    """`sending` rows claimed before a moment, from the `outbox_sending` index.
    Parameters: the cutoff."""
    return (
        "SELECT id, retry_count, claimed_by, attempt_started_at "  # noqa: S608
        f"FROM {TABLE} INDEXED BY outbox_sending "
        f"WHERE status = {literal_statuses([Status.SENDING])} AND claimed_at < %s ORDER BY id"
    )


def analyze_outbox(quoted_table: str) -> str:
    """Statistics for SQLite's planner about the outbox (retention, daily)."""
    return f"ANALYZE {quoted_table}"


def conditional_update(table: str, assignments: list[str], source: str, where: list[str]) -> str:
    """A transition: the rows whose ids, statuses (and fence) match are moved, each row's
    from-status kept (`previous_status`); the rows that moved, and where from, come back.
    `source`: a FROM clause of the rows' own values, or empty."""
    return (
        f"UPDATE {table} SET {', '.join(assignments)}{source} "  # noqa: S608
        f"WHERE {' AND '.join(where)} RETURNING id, previous_status"
    )


def events_from_json(table: str, columns: str) -> str:
    """PostgreSQL: the events of one transition from one JSON document of them (id,
    from_status, detail, data). Parameters: to, reason, actor, at, the document."""
    return (
        f"INSERT INTO {table} ({columns}) SELECT r.id, r.from_status, %s, %s, r.detail, "  # noqa: S608
        "r.data, %s, %s FROM jsonb_to_recordset(%s::jsonb) "
        "AS r(id bigint, from_status text, detail text, data jsonb)"
    )


def insert_row(table: str, columns: str, count: int) -> str:
    """One row of `count` values (SQLite's events, through executemany)."""
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * count)})"  # noqa: S608


def enqueue_values(table: str, columns: str, row: str, rows: int) -> str:
    """SQLite: many outbox rows, each inserted unless the day's row of its watch, trigger
    and channel exists (the dedup index)."""
    return (
        f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * rows)} "  # noqa: S608
        "ON CONFLICT DO NOTHING"
    )


def enqueue_unnest(table: str, columns: str, constants: int) -> str:
    """PostgreSQL: many outbox rows from one array per column that differs between rows
    (watch, device, channel, trigger, detected_at, payload), the rest constants; each
    inserted unless the day's row exists. Parameters: the constants, then the arrays."""
    return (
        f"INSERT INTO {table} ({columns}) "  # noqa: S608
        "SELECT u.*, " + ", ".join(["%s"] * constants) + " FROM unnest("
        "%s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::timestamptz[], %s::jsonb[]"
        ") AS u ON CONFLICT DO NOTHING"
    )
