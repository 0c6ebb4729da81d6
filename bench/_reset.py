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
            "UPDATE watches_watch SET last_notified_price = NULL, last_notified_at = NULL"
        )
