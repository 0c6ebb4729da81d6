"""Dispatch throughput: one cycle over 10,000 due rows (console channel, in-process demo
marketplace, 100 listings with 90 days of price history each, as a real re-fetch meets them),
beside the floor — the same number of raw conditional UPDATEs (claim, then outcome) in plain
sqlite3, committed per batch as the dispatcher commits — and queries per row.

Rounds alternate ours / floor (A/B/A/B…) on the same rows, reset between rounds; the figures
are medians. Besides wall time, each side's CPU time (`time.process_time`, all threads of
this process: Django, SQLite and the delivery threads alike) is compared: on a machine shared
with other work, the CPU ratio moves far less from run to run than the wall-clock one.

    .venv/bin/python bench/bench_dispatch.py [ROWS] [ROUNDS] [DEVICES]

DEVICES (default 1) spreads the rows over that many devices: with one, each batch is one
digest of OUTBOX_BATCH_SIZE items; with as many as rows, every row is sent alone.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import statistics
import sys
import time

from _reset import reset_due
from _setup import django_on_temp_sqlite

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
DEVICES = int(sys.argv[3]) if len(sys.argv) > 3 else 1
LISTINGS = 100
# 90 days of history, a point every 3 hours (what POLL_HISTORY_MIN_MINUTES keeps of a quiet
# listing): 720 points a listing, 72,000 in all.
HISTORY_DAYS, POINTS_PER_DAY = 90, 8

path = django_on_temp_sqlite("dispatch")

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox
from watches.models import Channel, Device, Listing, PricePoint, Watch


def build_rows() -> None:
    products = [
        DemoProduct(item_code=f"bench-{i}", name=f"bench item {i}", price=900)
        for i in range(LISTINGS)
    ]
    DemoProduct.objects.bulk_create(products)
    listings = Listing.objects.bulk_create(
        Listing(source="demo", item_code=p.item_code, name=p.name, price=900) for p in products
    )
    now = timezone.now()
    step = dt.timedelta(days=1) / POINTS_PER_DAY
    points = HISTORY_DAYS * POINTS_PER_DAY
    PricePoint.objects.bulk_create(
        (
            PricePoint(
                listing=listing,
                observed_at=now - (points - n) * step,
                price=900 + (n * 37 + i) % 200,
                shipping=0,
                in_stock=n % 50 != 0,
            )
            for i, listing in enumerate(listings)
            for n in range(points)
        ),
        batch_size=5000,
    )
    devices = Device.objects.bulk_create(
        Device(token_hash=f"bench-{d}", channel=Channel.CONSOLE) for d in range(DEVICES)
    )
    watches = Watch.objects.bulk_create(
        Watch(
            device=devices[i % DEVICES],
            listing=listings[i % LISTINGS],
            trigger="target_price",
            target_price=950,
        )
        for i in range(ROWS)
    )
    enqueue_many(Detection.for_watch(w, now, {"price": 900}) for w in watches)


def reset() -> None:
    """Every row due again, every watch without a baseline, the cycles' own points gone."""
    started = timezone.now()
    reset_due(started - dt.timedelta(seconds=1))
    PricePoint.objects.filter(observed_at__gt=started).delete()


def ours() -> tuple[float, float, int]:
    reset()
    settings.OUTBOX_CYCLE_SECONDS = 3600
    with CaptureQueriesContext(connection) as queries:
        started, cpu = time.perf_counter(), time.process_time()
        run_cycle(limit=ROWS)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    sent = Outbox.objects.filter(status="sent").count()
    assert sent == ROWS, f"{sent} of {ROWS} sent"
    return elapsed, cpu, len(queries)


def floor() -> tuple[float, float]:
    """Raw sqlite3: per row one conditional claim UPDATE and one conditional outcome UPDATE,
    committed per batch of OUTBOX_BATCH_SIZE (WAL, synchronous=NORMAL, like ours)."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute("UPDATE outbox_outbox SET status='pending', claimed_by=''")
    ids = [row[0] for row in raw.execute("SELECT id FROM outbox_outbox ORDER BY id")]
    batch = settings.OUTBOX_BATCH_SIZE
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        raw.execute("BEGIN IMMEDIATE")
        for row_id in chunk:
            raw.execute(
                "UPDATE outbox_outbox SET status='sending', claimed_by='h' "
                "WHERE id=? AND status IN ('pending','retry')",
                (row_id,),
            )
        raw.execute("COMMIT")
        raw.execute("BEGIN IMMEDIATE")
        for row_id in chunk:
            raw.execute(
                "UPDATE outbox_outbox SET status='sent', claimed_by='' "
                "WHERE id=? AND status='sending' AND claimed_by='h'",
                (row_id,),
            )
        raw.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    raw.close()
    return elapsed, cpu


build_rows()
wall, cpu = {"ours": [], "floor": []}, {"ours": [], "floor": []}
for _ in range(ROUNDS):
    seconds, cpu_seconds, queries = ours()
    wall["ours"].append(seconds)
    cpu["ours"].append(cpu_seconds)
    seconds, cpu_seconds = floor()
    wall["floor"].append(seconds)
    cpu["floor"].append(cpu_seconds)


def ratio(times: dict[str, list[float]]) -> str:
    per_round = [f / o for o, f in zip(times["ours"], times["floor"], strict=True)]
    rounds = ", ".join(f"{r:.3f}" for r in per_round)
    return f"{statistics.median(per_round):.3f}   (per round: {rounds})"


our_seconds, floor_seconds = statistics.median(wall["ours"]), statistics.median(wall["floor"])
print(
    f"rows: {ROWS} over {DEVICES} device(s), listings: {LISTINGS} × "
    f"{HISTORY_DAYS * POINTS_PER_DAY} points of history,"
)
print(f"batch: {settings.OUTBOX_BATCH_SIZE}, rounds: {ROUNDS} (ours / floor alternating, medians)")
print(f"dispatch cycle (ours):      {ROWS / our_seconds:>10,.0f} rows/s")
print(f"raw conditional UPDATEs:    {ROWS / floor_seconds:>10,.0f} rows/s   (claim + outcome only)")
print(f"queries per row (ours):     {queries / ROWS:.3f}")
print(f"ratio ours / floor, wall:   {ratio(wall)}")
print(f"ratio ours / floor, CPU:    {ratio(cpu)}")
