"""Putting a bench's outbox back as it was before a run."""

from __future__ import annotations


def reset_due(due) -> None:
    """Every outbox row due again at `due`, every watch without a baseline, no events."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM outbox_outboxevent")
        cursor.execute("DELETE FROM outbox_dispatchrun")
        cursor.execute(
            "UPDATE outbox_outbox SET status = 'pending', claimed_by = '', attempts = 0, "
            "retry_count = 0, next_attempt_at = %s",
            [due],
        )
        cursor.execute(
            "UPDATE watches_watch SET last_notified_price = NULL, last_notified_at = NULL, "
            "last_notified_detected_at = NULL"
        )


def settle() -> None:
    """What a steady production database has before a run, after a reset that rewrote every
    row seconds ago: on PostgreSQL, no dead tuples and fresh planner statistics (autovacuum's
    job: rounds seconds apart outrun it, and it may be off on a bench machine; dead tuples
    made every round slower than the one before); on SQLite, the write-ahead log folded back
    (the reset's pages would otherwise be checkpointed inside whichever measured commit
    crosses the threshold, ±25 % on one side of a round). Outside the measured time."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE")
        else:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
