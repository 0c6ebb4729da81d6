"""Dispatch throughput: one cycle over 10,000 due rows (console channel, in-process demo
marketplace), beside the floor — the same number of raw conditional UPDATEs (claim, then
outcome) in plain sqlite3, committed per batch as the dispatcher commits — and queries per row.

    .venv/bin/python bench/bench_dispatch.py [ROWS]
"""

from __future__ import annotations

import sqlite3
import sys
import time

from _setup import django_on_temp_sqlite

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
LISTINGS = 100

path = django_on_temp_sqlite("dispatch")

from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from watches.models import Channel, Device, Listing, Watch


def build_rows() -> None:
    products = [
        DemoProduct(item_code=f"bench-{i}", name=f"bench item {i}", price=900)
        for i in range(LISTINGS)
    ]
    DemoProduct.objects.bulk_create(products)
    listings = Listing.objects.bulk_create(
        Listing(source="demo", item_code=p.item_code, name=p.name, price=900) for p in products
    )
    device = Device.objects.create(token_hash="bench", channel=Channel.CONSOLE)
    watches = Watch.objects.bulk_create(
        Watch(
            device=device, listing=listings[i % LISTINGS], trigger="target_price", target_price=950
        )
        for i in range(ROWS)
    )
    now = timezone.now()
    enqueue_many(Detection.for_watch(w, now, {"price": 900}) for w in watches)


def ours() -> tuple[float, int, dict]:
    build_rows()
    settings.OUTBOX_CYCLE_SECONDS = 3600
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        result = run_cycle(limit=ROWS)
        elapsed = time.perf_counter() - started
    assert result.sent == ROWS, result
    return elapsed, len(queries), result.counts()


def floor() -> float:
    """Raw sqlite3: per row one conditional claim UPDATE and one conditional outcome UPDATE,
    committed per batch of OUTBOX_BATCH_SIZE (WAL, synchronous=NORMAL, like ours)."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute("UPDATE outbox_outbox SET status='pending', claimed_by=''")
    ids = [row[0] for row in raw.execute("SELECT id FROM outbox_outbox ORDER BY id")]
    batch = settings.OUTBOX_BATCH_SIZE
    started = time.perf_counter()
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
    elapsed = time.perf_counter() - started
    raw.close()
    return elapsed


our_seconds, queries, counts = ours()
floor_seconds = floor()
print(f"rows: {ROWS}, listings: {LISTINGS}, batch: {settings.OUTBOX_BATCH_SIZE}")
print(f"dispatch cycle (ours):      {ROWS / our_seconds:>10,.0f} rows/s   {counts}")
print(f"raw conditional UPDATEs:    {ROWS / floor_seconds:>10,.0f} rows/s   (claim + outcome only)")
print(f"queries per row (ours):     {queries / ROWS:.3f}")
print(f"ratio ours / floor:         {floor_seconds / our_seconds:.3f}")
