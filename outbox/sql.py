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
        "AND other.next_attempt_at <= %s) OR (other.status = "
        f"{literal_statuses([Status.SENT])} AND other.detected_at >= due.detected_at))) "
        f"FROM {TABLE} AS due INDEXED BY outbox_due "
        f"WHERE status IN ({due}) AND next_attempt_at <= %s "
        f"AND NOT EXISTS (SELECT 1 FROM {TABLE} AS flying "
        "WHERE flying.watch_id = due.watch_id AND flying.channel = due.channel "
        f"AND flying.status = {literal_statuses([Status.SENDING])}) "
        "ORDER BY next_attempt_at, id LIMIT %s"
    )


def due_siblings_sqlite(watch_index: str, watches: int) -> str:
    """Every due row of `watches` watches, and every sent one, through the watch index.
    Parameters: each watch id, then now."""
    return (
        f"SELECT id, watch_id, channel, detected_at, status FROM {TABLE} "  # noqa: S608
        f"INDEXED BY {watch_index} "
        f"WHERE watch_id IN ({', '.join(['%s'] * watches)}) "
        f"AND ((status IN ({literal_statuses(DUE_STATUSES)}) AND next_attempt_at <= %s) "
        f"OR status = {literal_statuses([Status.SENT])})"
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
