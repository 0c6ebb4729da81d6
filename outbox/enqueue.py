"""The one door into delivery: idempotent enqueue.

The database folds duplicates: a partial unique index on (watch, trigger, service day of
detected_at, channel) and `INSERT … ON CONFLICT DO NOTHING`, whose row count says whether a row
was really inserted. Not `INSERT OR IGNORE` (it would also swallow NOT NULL and CHECK errors),
and not `bulk_create(ignore_conflicts=True)` (it cannot tell what was inserted).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from common.fields import concrete_field
from outbox import sql
from outbox.models import Outbox, Status
from watches.models import Watch

_COLUMNS = (
    "watch",
    "device",
    "channel",
    "trigger",
    "status",
    "previous_status",
    "reason",
    "detail",
    "detected_at",
    "detected_payload",
    "retry_count",
    "attempts",
    "next_attempt_at",
    "claimed_by",
    "created_at",
    "updated_at",
)
# Rows per INSERT: 16 parameters each stays far below SQLite's 32,766.
_CHUNK = 500
# Rows per INSERT on PostgreSQL, where a statement has six array parameters whatever its rows.
_PG_CHUNK = 5000


@dataclass(frozen=True)
class Detection:
    """One notification to enqueue: what fired, for whom, when, and the snapshot of why."""

    watch_id: int
    device_id: int
    channel: str
    trigger: str
    detected_at: dt.datetime
    payload: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def for_watch(
        cls, watch: Watch, detected_at: dt.datetime, payload: Mapping[str, Any]
    ) -> Detection:
        return cls(
            watch_id=watch.pk,
            device_id=watch.device_id,
            channel=watch.device.channel,
            trigger=watch.trigger,
            detected_at=detected_at,
            payload=payload,
        )


def _fresh_row(now: dt.datetime) -> dict[str, Any]:
    """The columns every newly enqueued row starts with, whatever it detected."""
    return {
        "status": Status.PENDING.value,
        "previous_status": "",
        "reason": "",
        "detail": "",
        "retry_count": 0,
        "attempts": 0,
        "next_attempt_at": now,
        "claimed_by": "",
        "created_at": now,
        "updated_at": now,
    }


def detections_for(
    watch: Watch, detected_at: dt.datetime, payload: Mapping[str, Any]
) -> list[Detection]:
    """One detection per channel that reaches the watch's device right now (its push
    channel, its confirmed e-mail address, or both: `Device.receiving_channels`). Each becomes
    its own row, re-checked and recorded on its own."""
    return [
        Detection(
            watch_id=watch.pk,
            device_id=watch.device_id,
            channel=channel,
            trigger=watch.trigger,
            detected_at=detected_at,
            payload=payload,
        )
        for channel in watch.device.receiving_channels
    ]


def enqueue(watch: Watch, detected_at: dt.datetime, payload: Mapping[str, Any]) -> bool:
    """Enqueue one notification for `watch`. True only when a row was really inserted; False
    when the database folded it into the row already holding that watch/trigger/day/channel."""
    return enqueue_many([Detection.for_watch(watch, detected_at, payload)]) == 1


def enqueue_many(detections: Iterable[Detection], *, now: dt.datetime | None = None) -> int:
    """Enqueue many detections in few statements. Returns how many rows were inserted."""
    now = now or timezone.now()
    if connection.vendor == "postgresql":
        return _enqueue_unnest(detections, now)
    fields = [concrete_field(Outbox, name) for name in _COLUMNS]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    table = connection.ops.quote_name(Outbox._meta.db_table)
    inserted = 0
    batch: list[list[Any]] = []

    def flush() -> int:
        if not batch:
            return 0
        statement = sql.enqueue_values(table, columns, row_sql, len(batch))
        params = [value for row in batch for value in row]
        batch.clear()
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.rowcount

    # get_db_prep_save gives each database its own format (SQLite's datetime text,
    # PostgreSQL's jsonb adapter), exactly as the ORM would write it. The columns every row
    # shares are converted once per call, and each distinct detection time once: converting
    # every field of every row was most of the cost of a large detection run.
    by_name = {f.name: f for f in fields}
    shared = {
        name: by_name[name].get_db_prep_save(value, connection)
        for name, value in _fresh_row(now).items()
    }
    times: dict[dt.datetime, Any] = {}

    def prep(name: str, value: Any) -> Any:
        return by_name[name].get_db_prep_save(value, connection)

    with transaction.atomic():
        for d in detections:
            detected_at = times.get(d.detected_at)
            if detected_at is None:
                detected_at = times[d.detected_at] = prep("detected_at", d.detected_at)
            values = {
                **shared,
                "watch": prep("watch", d.watch_id),
                "device": prep("device", d.device_id),
                "channel": prep("channel", d.channel),
                "trigger": prep("trigger", d.trigger),
                "detected_at": detected_at,
                "detected_payload": prep("detected_payload", dict(d.payload)),
            }
            batch.append([values[name] for name in _COLUMNS])
            if len(batch) >= _CHUNK:
                inserted += flush()
        inserted += flush()
    return inserted


def _enqueue_unnest(detections: Iterable[Detection], now: dt.datetime) -> int:
    """PostgreSQL: one `INSERT … SELECT FROM unnest(arrays)` per _PG_CHUNK rows — six array
    parameters, one per column that differs between rows, the rest constants. A VALUES list
    of 500 rows is 8,000 parameters that psycopg binds into the statement text and
    PostgreSQL parses anew each time (decision 0003)."""
    fields = {name: concrete_field(Outbox, name) for name in _COLUMNS}
    column = {name: connection.ops.quote_name(f.column) for name, f in fields.items()}
    table = connection.ops.quote_name(Outbox._meta.db_table)
    varying = ("watch", "device", "channel", "trigger", "detected_at", "detected_payload")
    constants = _fresh_row(now)
    names = [*varying, *constants]
    statement = sql.enqueue_unnest(table, ", ".join(column[name] for name in names), len(constants))
    payload_field = fields["detected_payload"]
    assert isinstance(payload_field, models.JSONField)  # Outbox.detected_payload is declared one
    encoder = payload_field.encoder
    shared = list(constants.values())
    inserted = 0
    rows = iter(detections)
    with transaction.atomic(), connection.cursor() as cursor:
        while chunk := list(itertools.islice(rows, _PG_CHUNK)):
            arrays = (
                [d.watch_id for d in chunk],
                [d.device_id for d in chunk],
                [d.channel for d in chunk],
                [d.trigger for d in chunk],
                [d.detected_at for d in chunk],
                [json.dumps(dict(d.payload), cls=encoder) for d in chunk],
            )
            cursor.execute(statement, [*shared, *arrays])
            inserted += cursor.rowcount
    return inserted
