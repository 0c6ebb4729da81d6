#!/usr/bin/env python
"""Rows/s of the bulk detection path (`outbox.enqueue.enqueue_many`) beside a raw driver
`executemany` of the same rows, with `INSERT … ON CONFLICT DO NOTHING`, into a copy of the
outbox table with the same indexes (the partial unique day-dedup expression index among them)
and the same foreign keys: `sqlite3` on SQLite, psycopg (server-side binding, which pipelines
executemany) on PostgreSQL.

Both sides start from the same Detection objects and convert them to column values inside the
timing (datetimes, the payload to JSON), each in one transaction. Two timings each: fresh rows
(all inserted), then the same rows again (all folded by the index). Sides alternate
(A/B/A/B…) for ROUNDS rounds; medians are printed.

Standalone: `python bench/bench_enqueue.py` measures SQLite (a temporary file) and PostgreSQL
(a database `yasugoro_bench_enqueue_<pid>` it creates on $BENCH_PG_URL and drops at exit;
skipped when no server answers), one process each. BENCH_ROWS sets the row count (default
20,000), BENCH_ROUNDS the rounds (default 3).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS = int(os.environ.get("BENCH_ROWS", "20000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def main() -> None:
    # Production settings: DEBUG would keep a log of every query.
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("DEMO_TICK", "0")
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, each_database

    if len(sys.argv) < 2:
        each_database(__file__, [])
        return
    if sys.argv[1] == "sqlite":
        run(raw_side=_sqlite_side(django_on_temp_sqlite("enqueue")))
    else:
        django_on_temp_postgres(f"enqueue_{os.getpid()}")
        run(raw_side=_postgres_side())


def run(raw_side: Callable) -> None:
    from django.db import connection

    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox
    from watches.models import Channel, Device, Listing, Trigger, Watch

    device = Device.objects.create(token_hash=secrets.token_hex(32), channel=Channel.CONSOLE)
    listings = Listing.objects.bulk_create(
        Listing(source="demo", item_code=f"bench-{i}", name=f"Bench item {i}", price=1000)
        for i in range(200)
    )
    watches = Watch.objects.bulk_create(
        (
            Watch(device=device, listing=listings[i % len(listings)], target_price=900)
            for i in range(ROWS)
        ),
        batch_size=2000,
    )
    now = dt.datetime.now(dt.UTC)
    detections = [
        Detection(
            watch_id=watch.pk,
            device_id=device.pk,
            channel=Channel.CONSOLE,
            trigger=Trigger.TARGET_PRICE,
            detected_at=now,
            payload=_payload(watch, now),
        )
        for watch in watches
    ]
    raw_insert, raw_clear, version = raw_side(detections, now)
    table = connection.ops.quote_name(Outbox._meta.db_table)

    def django_insert() -> int:
        return enqueue_many(detections, now=now)

    def django_clear() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table}")

    sides = {
        "enqueue_many": (django_insert, django_clear),
        "raw executemany": (raw_insert, raw_clear),
    }
    timings: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in sides}
    for _ in range(ROUNDS):
        for name, (insert, clear) in sides.items():
            clear()
            timings[name][0].append(_timed(insert, expect=ROWS))
            timings[name][1].append(_timed(insert, expect=0))
    results = {
        name: (statistics.median(fresh), statistics.median(folded))
        for name, (fresh, folded) in timings.items()
    }

    print(f"{ROWS:,} detections, {version}, median of {ROUNDS} interleaved rounds")
    print(f"{'':<34}{'new rows/s':>14}{'all folded rows/s':>20}")
    for label, (fresh_s, folded_s) in results.items():
        name = {
            "enqueue_many": "enqueue_many",
            "raw executemany": f"raw {connection.vendor} executemany",
        }[label]
        print(f"{name:<34}{ROWS / fresh_s:>14,.0f}{ROWS / folded_s:>20,.0f}")
    (dj_fresh, dj_fold), (raw_fresh, raw_fold) = results.values()
    print(f"enqueue_many / raw: {raw_fresh / dj_fresh:.2f}x new, {raw_fold / dj_fold:.2f}x folded")


def _columns() -> tuple[list, str]:
    from common.fields import concrete_field
    from outbox.enqueue import _COLUMNS
    from outbox.models import Outbox

    fields = [concrete_field(Outbox, name) for name in _COLUMNS]
    return fields, ", ".join(f'"{f.column}"' for f in fields)


def _sqlite_side(db_path: Path) -> Callable:
    def side(detections: list, now: dt.datetime):
        from django.db import connection

        from outbox.models import Outbox

        raw = sqlite3.connect(db_path, isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=NORMAL")
        raw.execute("PRAGMA foreign_keys=ON")  # as Django's connections do
        _copy_sqlite_table(raw, Outbox._meta.db_table, "bench_raw_outbox")
        fields, columns = _columns()
        insert = (
            f'INSERT INTO "bench_raw_outbox" ({columns}) '
            f"VALUES ({', '.join('?' * len(fields))}) ON CONFLICT DO NOTHING"
        )
        adapt = connection.ops.adapt_datetimefield_value

        def raw_insert() -> int:
            stamp = adapt(now)
            rows = [
                (
                    d.watch_id, d.device_id, d.channel, d.trigger, "pending", "", "", "",
                    adapt(d.detected_at), json.dumps(dict(d.payload)), 0, 0, stamp, "", stamp,
                    stamp,
                )
                for d in detections
            ]  # fmt: skip
            raw.execute("BEGIN IMMEDIATE")
            cursor = raw.executemany(insert, rows)
            raw.execute("COMMIT")
            return cursor.rowcount

        def clear() -> None:
            raw.execute('DELETE FROM "bench_raw_outbox"')

        return raw_insert, clear, f"SQLite {sqlite3.sqlite_version}"

    return side


def _postgres_side() -> Callable:
    def side(detections: list, now: dt.datetime):
        import psycopg
        from django.db import connection
        from psycopg.types.json import Jsonb

        from outbox.models import Outbox

        table = Outbox._meta.db_table
        params = connection.get_connection_params()
        raw = psycopg.connect(**params)  # its own connection, server-side binding
        with raw.transaction():
            raw.execute('DROP TABLE IF EXISTS "bench_raw_outbox"')
            raw.execute(f'CREATE TABLE "bench_raw_outbox" (LIKE "{table}" INCLUDING ALL)')
            raw.execute(
                'ALTER TABLE "bench_raw_outbox" ADD FOREIGN KEY ("watch_id") '
                'REFERENCES "watches_watch" ("id") DEFERRABLE INITIALLY DEFERRED, '
                'ADD FOREIGN KEY ("device_id") REFERENCES "watches_device" ("id") '
                "DEFERRABLE INITIALLY DEFERRED"
            )
        fields, columns = _columns()
        insert = (
            f'INSERT INTO "bench_raw_outbox" ({columns}) '
            f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT DO NOTHING"
        )

        def raw_insert() -> int:
            rows = [
                (
                    d.watch_id, d.device_id, d.channel, d.trigger, "pending", "", "", "",
                    d.detected_at, Jsonb(dict(d.payload)), 0, 0, now, "", now, now,
                )
                for d in detections
            ]  # fmt: skip
            with raw.transaction(), raw.cursor() as cursor:
                cursor.executemany(insert, rows)
                return cursor.rowcount

        def clear() -> None:
            with raw.transaction():
                raw.execute('DELETE FROM "bench_raw_outbox"')

        [(version,)] = raw.execute("SHOW server_version").fetchall()
        return raw_insert, clear, f"PostgreSQL {version}, psycopg {psycopg.__version__}"

    return side


def _payload(watch, now: dt.datetime) -> dict:
    """A snapshot the size polling writes."""
    return {
        "value": "880",
        "line": "900",
        "trigger": "target_price",
        "price": 880,
        "shipping": 0,
        "effective_price": 880,
        "in_stock": True,
        "typical": "1000",
        "low_90": 870,
        "observed_at": now.isoformat(),
        "listing": "スコッティ フラワーパック 12ロール",
        "listing_id": watch.listing_id,
        "item_code": "tp-scottie-12r",
        "target_price": 900,
        "drop_percent": None,
        "use_unit_price": False,
    }


def _copy_sqlite_table(raw: sqlite3.Connection, source: str, target: str) -> None:
    """The outbox table under another name, with every index it has — the day-dedup partial
    unique expression index among them — so both sides maintain the same indexes."""
    (table_sql,) = raw.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (source,)
    ).fetchone()
    indexes = raw.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
        "AND sql IS NOT NULL",
        (source,),
    ).fetchall()
    if "outbox_one_per_watch_trigger_day_channel" not in {name for name, _ in indexes}:
        raise SystemExit("the outbox table has no day-dedup index")
    raw.execute(f'DROP TABLE IF EXISTS "{target}"')
    raw.execute(table_sql.replace(f'"{source}"', f'"{target}"', 1))
    for name, sql in indexes:
        sql = sql.replace(f'"{source}"', f'"{target}"').replace(f'"{name}"', f'"{target}_{name}"')
        raw.execute(sql)


def _timed(fn: Callable[[], int], *, expect: int) -> float:
    started = time.perf_counter()
    inserted = fn()
    elapsed = time.perf_counter() - started
    if inserted != expect:
        raise SystemExit(f"{fn.__name__} inserted {inserted} rows, expected {expect}")
    return elapsed


if __name__ == "__main__":
    main()
