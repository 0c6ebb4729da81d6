#!/usr/bin/env python
"""Rows/s of the bulk detection path (`outbox.enqueue.enqueue_many`) beside a raw `sqlite3`
`executemany` of the same rows, with `INSERT … ON CONFLICT DO NOTHING`, into a table with the
same partial unique expression index (the DDL of the migrated outbox table and of all its
indexes, copied: the same columns, foreign keys and indexes on both sides).

Both sides start from the same Detection objects and convert them to column values inside the
timing (datetimes to SQLite text, the payload to JSON), each in one transaction. Two rounds
each: fresh rows (all inserted), then the same rows again (all folded by the index).

Standalone: `python bench/bench_enqueue.py` (a temporary SQLite file, migrated, then
removed). BENCH_ROWS sets the row count (default 20,000). Prints medians of 3 runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = int(os.environ.get("BENCH_ROWS", "20000"))
REPEAT = 3


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="yasugoro-bench-"))
    db_path = workdir / "bench.sqlite3"
    # Before django.setup(): the settings read them at import.
    os.environ["DATABASE_URL"] = f"sqlite:///{db_path}"
    os.environ["YASUGORO_VAR_DIR"] = str(workdir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "yasugoro.settings"
    os.environ["DEMO_TICK"] = "0"
    # Production settings (DEBUG off) want a VAPID contact; nothing is pushed here.
    os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@yasugoro.example")
    sys.path.insert(0, str(ROOT))
    try:
        run(db_path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(db_path: Path) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from outbox.enqueue import _COLUMNS, Detection, enqueue_many
    from outbox.models import Outbox
    from watches.models import Channel, Device, Listing, Trigger, Watch

    call_command("migrate", verbosity=0)
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

    table = Outbox._meta.db_table
    raw = sqlite3.connect(db_path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute("PRAGMA foreign_keys=ON")  # as Django's connections do
    _copy_table(raw, table, "bench_raw_outbox")

    fields = [Outbox._meta.get_field(name) for name in _COLUMNS]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    insert = (
        f'INSERT INTO "bench_raw_outbox" ({columns}) '
        f"VALUES ({', '.join('?' * len(fields))}) ON CONFLICT DO NOTHING"
    )
    adapt = connection.ops.adapt_datetimefield_value

    def raw_rows() -> list[tuple]:
        stamp = adapt(now)
        return [
            (
                d.watch_id, d.device_id, d.channel, d.trigger, "pending", "", "", "",
                adapt(d.detected_at), json.dumps(dict(d.payload)), 0, 0, stamp, "", stamp, stamp,
            )
            for d in detections
        ]  # fmt: skip

    def raw_insert() -> int:
        raw.execute("BEGIN IMMEDIATE")
        cursor = raw.executemany(insert, raw_rows())
        raw.execute("COMMIT")
        return cursor.rowcount

    def django_insert() -> int:
        return enqueue_many(detections, now=now)

    def clear() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f'DELETE FROM "{table}"')
        raw.execute('DELETE FROM "bench_raw_outbox"')

    results = {}
    for label, fn in (("enqueue_many", django_insert), ("raw executemany", raw_insert)):
        fresh, folded = [], []
        for _ in range(REPEAT):
            clear()
            fresh.append(_timed(fn, expect=ROWS))
            folded.append(_timed(fn, expect=0))
        results[label] = (statistics.median(fresh), statistics.median(folded))
    raw.close()

    print(f"{ROWS:,} detections, SQLite {sqlite3.sqlite_version}, median of {REPEAT} runs")
    print(f"{'':<34}{'new rows/s':>14}{'all folded rows/s':>20}")
    for label, (fresh_s, folded_s) in results.items():
        name = {
            "enqueue_many": "enqueue_many (bulk ON CONFLICT)",
            "raw executemany": "raw sqlite3 executemany",
        }[label]
        print(f"{name:<34}{ROWS / fresh_s:>14,.0f}{ROWS / folded_s:>20,.0f}")
    (dj_fresh, dj_fold), (raw_fresh, raw_fold) = results.values()
    print(
        f"ratio raw/enqueue_many: {dj_fresh / raw_fresh:.1f}x new, {dj_fold / raw_fold:.1f}x folded"
    )


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


def _copy_table(raw: sqlite3.Connection, source: str, target: str) -> None:
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
