"""Queue scale: the dispatcher's due-row read (`outbox.queue.select_due`, the SELECT of
`claim_due`: status IN (pending, retry) AND next_attempt_at <= now ORDER BY next_attempt_at,
id LIMIT 500) with 1,000 due rows and 1,000 not-yet-due retries, when 10,000 and then
1,000,000 terminal rows (sent, failed, dropped) sit in the same table — and then with a
backlog of 100,000 retries not yet due. The partial `outbox_due` index holds only pending and
retry rows in due order, so the time should stay flat. Baselines, same run: the plain ORM
query as SQLite's planner runs it without statistics, and a full scan (`NOT INDEXED`).

    .venv/bin/python bench/bench_queue_scale.py [TERMINAL_ROWS]
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import statistics
import sys
import time

from _setup import django_on_temp_sqlite

BIG = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
SMALL = 10_000
WATCHES = 1_000
DUE = 1_000
REPEAT = 200

path = django_on_temp_sqlite("queue")

from django.conf import settings
from django.db import connection
from django.utils import timezone

from common.fields import concrete_field
from outbox.enqueue import _COLUMNS, Detection, enqueue_many
from outbox.models import DUE_STATUSES, Outbox
from outbox.queue import select_due
from watches.models import Channel, Device, Listing, Trigger, Watch


def build_due(now: dt.datetime) -> list[Watch]:
    device = Device.objects.create(token_hash="bench", channel=Channel.CONSOLE)
    listing = Listing.objects.create(source="demo", item_code="bench", name="bench", price=900)
    watches = Watch.objects.bulk_create(
        Watch(device=device, listing=listing, trigger=Trigger.TARGET_PRICE, target_price=950)
        for _ in range(WATCHES + DUE * 2)
    )
    due, later = watches[WATCHES : WATCHES + DUE], watches[WATCHES + DUE :]
    enqueue_many((Detection.for_watch(w, now, {}) for w in due), now=now)
    enqueue_many((Detection.for_watch(w, now, {}) for w in later), now=now)
    # The second half are retries not yet due: they sit in the index, ahead of nothing.
    Outbox.objects.filter(watch__in=later).update(
        status="retry", next_attempt_at=now + dt.timedelta(hours=1)
    )
    return watches[:WATCHES]


def add_terminal(watches: list[Watch], start: int, stop: int, now: dt.datetime) -> None:
    """Terminal rows `start`..`stop`: one per watch and past day, a mix of sent, failed and
    dropped, written with raw executemany (this is set-up, not what is measured)."""
    adapt = connection.ops.adapt_datetimefield_value
    days: dict[int, str] = {}
    stamp = adapt(now)
    device_id = watches[0].device_id
    statuses = ("sent", "sent", "sent", "failed", "dropped")

    def rows():
        for i in range(start, stop):
            day = i // len(watches) + 1
            when = days.get(day) or days.setdefault(day, adapt(now - dt.timedelta(days=day)))
            yield (
                watches[i % len(watches)].pk, device_id, "console", "target_price",
                statuses[i % 5], "sending", "delivered", "", when, "{}", 0, 1, when, "",
                when, stamp,
            )  # fmt: skip

    fields = [concrete_field(Outbox, name) for name in _COLUMNS]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany(
        f"INSERT INTO outbox_outbox ({columns}) VALUES ({', '.join('?' * len(fields))})", rows()
    )
    raw.execute("COMMIT")
    raw.close()


def timed_ms(read, repeat: int = REPEAT) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        got = read()
        times.append(time.perf_counter() - started)
        assert len(got) == min(DUE, settings.OUTBOX_BATCH_SIZE), len(got)
    return statistics.median(times) * 1000


def ours_ms(now: dt.datetime) -> float:
    return timed_ms(lambda: select_due(now, settings.OUTBOX_BATCH_SIZE))


def orm_ms(now: dt.datetime) -> float:
    query = (
        Outbox.objects.filter(status__in=DUE_STATUSES, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "id")
        .values_list("id", "attempts")
    )
    return timed_ms(lambda: list(query[: settings.OUTBOX_BATCH_SIZE]), REPEAT // 4)


def full_scan_ms(now: dt.datetime) -> float:
    raw = sqlite3.connect(path)
    sql = (
        "SELECT id, attempts FROM outbox_outbox NOT INDEXED WHERE status IN ('pending', 'retry') "
        "AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?"
    )
    args = (connection.ops.adapt_datetimefield_value(now), settings.OUTBOX_BATCH_SIZE)
    times = []
    for _ in range(max(5, REPEAT // 20)):
        started = time.perf_counter()
        raw.execute(sql, args).fetchall()
        times.append(time.perf_counter() - started)
    raw.close()
    return statistics.median(times) * 1000


def plan(now: dt.datetime) -> str:
    statuses = ", ".join(f"'{status.value}'" for status in DUE_STATUSES)
    sql = (
        f"EXPLAIN QUERY PLAN SELECT id, attempts FROM outbox_outbox INDEXED BY outbox_due "
        f"WHERE status IN ({statuses}) AND next_attempt_at <= ? ORDER BY next_attempt_at, id "
        "LIMIT 500"
    )
    raw = sqlite3.connect(path)
    try:
        return "; ".join(row[-1] for row in raw.execute(sql, ("9999",)).fetchall())
    finally:
        raw.close()


def add_waiting_retries(count: int, now: dt.datetime) -> None:
    """`count` terminal rows become retries due in an hour: a push service outage's backlog."""
    later = connection.ops.adapt_datetimefield_value(now + dt.timedelta(hours=1))
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")
    raw.execute(
        "UPDATE outbox_outbox SET status = 'retry', next_attempt_at = ? WHERE id IN "
        "(SELECT id FROM outbox_outbox WHERE status = 'failed' LIMIT ?)",
        (later, count),
    )
    raw.execute("COMMIT")
    raw.close()


def measure(label: str, now: dt.datetime) -> tuple[str, float, float, float]:
    return label, ours_ms(now), orm_ms(now), full_scan_ms(now)


now = timezone.now()
watches = build_due(now)
add_terminal(watches, 0, SMALL, now)
results = [measure(f"{SMALL:,} terminal, {DUE:,} waiting retries", now)]
started = time.perf_counter()
add_terminal(watches, SMALL, BIG, now)
setup_s = time.perf_counter() - started
results.append(measure(f"{BIG:,} terminal, {DUE:,} waiting retries", now))
BACKLOG = min(100_000, BIG // 5)
add_waiting_retries(BACKLOG, now)
results.append(measure(f"{BIG - BACKLOG:,} terminal, {DUE + BACKLOG:,} waiting retries", now))

print(f"due rows: {DUE}, batch {settings.OUTBOX_BATCH_SIZE}; medians")
print(f"plan (ours): {plan(now)}")
print(f"(set-up: {BIG - SMALL:,} more terminal rows inserted in {setup_s:.1f} s)")
print(f"{'table':<44}{'ours':>10}{'ORM, planner':>14}{'full scan':>12}")
for label, ours, orm, scan in results:
    print(f"{label:<44}{ours:>7.2f} ms{orm:>11.2f} ms{scan:>9.2f} ms")
small, big, backlog = (ours for _, ours, _, _ in results)
big_scan, backlog_orm = results[1][3], results[2][2]
print(f"ratio ours {BIG:,} / {SMALL:,} terminal rows: {big / small:.2f} (flat = 1)")
print(f"ratio ours, {DUE + BACKLOG:,} / {DUE:,} retries waiting: {backlog / big:.2f} (flat = 1)")
print(f"ratio full scan / ours at {BIG:,}: {big_scan / big:.0f}x")
print(f"ratio ORM-planner / ours with the retry backlog: {backlog_orm / backlog:.0f}x")
