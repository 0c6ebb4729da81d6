"""Where the processes' counts meet: `flush` adds what this process counted
(`common.counters`) to the shared `Counter` rows, which /metrics reads."""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django.utils import timezone

from common import counters
from monitoring.models import Counter

log = logging.getLogger("monitoring.store")


def flush() -> int:
    """Add what this process counted to the shared rows; returns how many series moved.
    Never raises: a database that is down keeps the counts for the next flush."""
    taken = counters.take_pending()
    if not taken:
        return 0
    try:
        _upsert(taken)
    except Exception:
        log.warning("metrics flush failed; kept for the next one", exc_info=True)
        counters.give_back(taken)
        return 0
    return len(taken)


def _upsert(amounts: dict[tuple[str, str], float]) -> None:
    table = connection.ops.quote_name(Counter._meta.db_table)
    now = Counter._meta.get_field("updated_at").get_db_prep_save(timezone.now(), connection)
    # In one order everywhere, so two processes flushing at once never deadlock.
    rows = [(name, labels, amount, now) for (name, labels), amount in sorted(amounts.items())]
    sql = (
        f"INSERT INTO {table} (name, labels, value, updated_at) VALUES (%s, %s, %s, %s) "  # noqa: S608
        f"ON CONFLICT (name, labels) DO UPDATE SET value = {table}.value + excluded.value, "
        "updated_at = excluded.updated_at"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)
