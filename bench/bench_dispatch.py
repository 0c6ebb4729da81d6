"""Dispatch throughput: one dispatcher cycle (console channel, the in-process demo marketplace,
listings with 90 days of price history each, as a real re-fetch meets them) beside its floor,
on SQLite and on PostgreSQL (a database the bench creates and drops), in four worlds:

- 10,000 due rows over 100 listings;
- 2,000 rows over 10 listings, and 2,000 rows over 2,000 listings: how dispatch grows with
  the number of listings (shown for information: no person feels it, so it is no target);
- 2,000 rows over 2,000 listings whose price moved since the poll that detected them (still
  below the line): every re-fetch writes a price point too — shown beside the others.

Before each run every listing is as the poll that detected its rows left it two minutes
earlier (`_world.as_the_poll_left_them`): polled, statistics computed, its last point the price
it saw. The dispatcher asks the marketplace again (older than OUTBOX_REFETCH_MAX_AGE), folds the
answer into those statistics, and writes a point only where the price moved.

The floor does the writes the dispatcher does, as raw set-based SQL on the same connection, one
statement per batch each, committed per batch as the dispatcher commits: select the due rows and
claim them (status, holder, `claimed_at`, `attempts + 1`) with their `claimed` events; keep the
re-fetched listings (price, stock, `last_polled_at`, typical price, 90-day low) and, where the
price moved, a price point, once per listing per cycle; write the intent (`attempt_started_at`);
record the outcomes (`sent`, `sent_at`, `sent_message` as JSON, fenced by holder and attempt)
with their `delivered` events (the fresh value and the message as JSON); move the watches'
baselines; and a DispatchRun. What it leaves out is what only the dispatcher needs: reading the
rows, history and watches, asking the marketplace, judging, building messages, threads — so the
ratio says what that costs beside the writes.

Rounds alternate ours / floor world by world (A/B/A/B…) over the same rows, reset between runs,
and the two worlds of 2,000 rows take turns going first; the figures are medians, a
ratio the median of the per-round ratios. Besides wall time, each side's CPU time
(`time.process_time`: all threads of this process) is compared.

    .venv/bin/python bench/bench_dispatch.py [ROUNDS] [sqlite|postgresql]
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import time

# Five by default: on a shared machine one round's ratio can land a tenth either side of the
# others, and a median of three then moves with a single round.
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 5
# (rows, listings): the classic world, two worlds of 2,000 rows, and the second of
# them with prices that moved since the poll (MOVED).
WORLDS = ((10_000, 100), (2_000, 10), (2_000, 2_000), (2_000, 2_000))
MOVED = 3
# 90 days of history, a point every 3 hours (what POLL_HISTORY_MIN_MINUTES keeps of a quiet
# listing): 720 points a listing.
HISTORY_DAYS, POINTS_PER_DAY = 90, 8
FAR = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
# Production settings (DEBUG keeps a log of every query), the demo marketplace in-process, one
# cycle takes every due row.
SETTINGS = {"DEBUG": "0", "DEMO_MARKET": "1", "DEMO_TICK": "0", "OUTBOX_CYCLE_SECONDS": "3600"}


def main() -> None:
    os.environ.update(SETTINGS)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, each_database

    vendor = sys.argv[-1] if sys.argv[-1] in ("sqlite", "postgresql") else None
    if vendor is None:
        each_database(__file__, [str(ROUNDS)])
        return
    if vendor == "sqlite":
        django_on_temp_sqlite("dispatch")
    else:
        django_on_temp_postgres("dispatch")
    run(vendor)


def run(vendor: str) -> None:
    from django.conf import settings
    from django.db import connection

    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES

    worlds = [build(n, rows, listings) for n, (rows, listings) in enumerate(WORLDS)]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # what autovacuum (PostgreSQL) keeps in production
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        built = cursor.fetchone()[0]
    # As a django-q2 worker does at spawn (outbox.apps); the floor's side shares the process.
    freeze_loaded(["outbox.tasks"], WORKER_REGISTRIES)
    wall: dict[tuple[int, str], list[float]] = {}
    cpu: dict[tuple[int, str], list[float]] = {}
    queries: dict[tuple[int, str], int] = {}
    for round_ in range(ROUNDS):
        # The two worlds of 2,000 rows take turns going first, so a machine
        # speeding up or slowing down within a round favours neither.
        order = worlds if round_ % 2 == 0 else [worlds[0], worlds[2], worlds[1], *worlds[3:]]
        for world in order:
            for side, measure in (("ours", ours), ("floor", floor)):
                reset(world, built)
                seconds, cpu_seconds, count = counted(lambda: measure(world))  # noqa: B023
                wall.setdefault((world.n, side), []).append(seconds)
                cpu.setdefault((world.n, side), []).append(cpu_seconds)
                queries[(world.n, side)] = count
    print(
        f"\n{vendor}: batch {settings.OUTBOX_BATCH_SIZE}, {ROUNDS} rounds (ours / floor "
        f"alternating), medians; {HISTORY_DAYS * POINTS_PER_DAY} price points a listing; load "
        f"{os.getloadavg()[0]:.1f}"
    )
    rates = {}
    for world in worlds:
        ours_s = statistics.median(wall[(world.n, "ours")])
        floor_s = statistics.median(wall[(world.n, "floor")])
        rates[world.n] = wall[(world.n, "ours")]
        print(
            f"  {world.rows:,} rows over {world.listings:,} listings"
            f"{', prices moved' if world.n == MOVED else ''}: "
            f"ours {world.rows / ours_s:>7,.0f} rows/s, "
            f"floor {world.rows / floor_s:>7,.0f} rows/s; queries a row "
            f"{queries[(world.n, 'ours')] / world.rows:.3f} / "
            f"{queries[(world.n, 'floor')] / world.rows:.3f}\n"
            f"    ratio ours / floor, wall: {ratio(wall, world.n)}\n"
            f"    ratio ours / floor, CPU:  {ratio(cpu, world.n)}"
        )
    # Same rows, 2,000 listings against 10: each round's ratio of rates (time over time);
    # in CPU time too, which another tenant of a shared machine disturbs less.
    for n, label in ((2, "2,000 listings"), (MOVED, "2,000 listings, prices moved")):
        for kind, times in (("wall", rates), ("CPU", {k: cpu[(k, "ours")] for k in rates})):
            per_round = [f / m for f, m in zip(times[1], times[n], strict=True)]
            rounds = ", ".join(f"{r:.2f}" for r in per_round)
            print(
                f"  {label} / 10 listings (ours, same 2,000 rows), {kind}: "
                f"{statistics.median(per_round):.2f}×  (per round: {rounds})",
                flush=True,
            )


def ratio(times: dict[tuple[int, str], list[float]], n: int) -> str:
    per_round = [f / o for o, f in zip(times[(n, "ours")], times[(n, "floor")], strict=True)]
    rounds = ", ".join(f"{r:.3f}" for r in per_round)
    return f"{statistics.median(per_round):.3f}   (per round: {rounds})"


def counted(measure) -> tuple[float, float, int]:
    """Wall and CPU seconds of `measure()`, and the statements it sent."""
    from django.db import connection

    count = 0

    def counter(execute, sql, params, many, context):
        nonlocal count
        count += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        wall, cpu = time.perf_counter(), time.process_time()
        measure()
        return time.perf_counter() - wall, time.process_time() - cpu, count


class World:
    def __init__(self, n: int, rows: int, listings: int, device_id: int) -> None:
        self.n, self.rows, self.listings, self.device_id = n, rows, listings, device_id


def build(n: int, rows: int, listing_count: int) -> World:
    """`listing_count` demo listings at ¥900 with their history, one console device, `rows`
    target-price watches (¥950) over the listings, one due row each."""
    from _world import due_rows, listings_with_history

    from watches.models import Channel, Device

    codes = [f"bench-{n}-{i}" for i in range(listing_count)]
    listings = listings_with_history(codes, HISTORY_DAYS, POINTS_PER_DAY)
    device = Device.objects.create(token_hash=f"bench-{n}", channel=Channel.CONSOLE)
    due_rows([device], listings, rows, Channel.CONSOLE)
    return World(n, rows, listing_count, device.pk)


def reset(world: World, built: int) -> None:
    """`world`'s rows due, every other world's rows pending far in the future; no events, no
    baselines; every listing as the poll that detected its rows left it."""
    from _reset import settle
    from _world import as_the_poll_left_them
    from django.db import connection, transaction
    from django.utils import timezone

    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM outbox_outboxevent")
        cursor.execute("DELETE FROM outbox_dispatchrun")
        cursor.execute(
            "UPDATE outbox_outbox SET status = 'pending', claimed_by = '', attempts = 0, "
            "retry_count = 0, attempt_started_at = NULL, "
            "next_attempt_at = CASE WHEN device_id = %s THEN %s ELSE %s END",
            [world.device_id, now - dt.timedelta(seconds=1), FAR],
        )
        cursor.execute(
            "UPDATE watches_watch SET last_notified_price = NULL, last_notified_at = NULL, "
            "last_notified_detected_at = NULL"
        )
    as_the_poll_left_them(now, built, moved=f"bench-{MOVED}-")
    settle()


def ours(world: World) -> None:
    from outbox.dispatch import run_cycle

    result = run_cycle()
    assert result.as_json()["sent"] == world.rows, f"{result.as_json()} of {world.rows}"


def floor(world: World) -> None:
    """The dispatcher's writes for `world`'s due rows, set-based, batch by batch."""
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    json_object = "json_build_object" if connection.vendor == "postgresql" else "json_object"
    holder, started = "floor", timezone.now()
    seen: set[int] = set()
    batch, sent = settings.OUTBOX_BATCH_SIZE, 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            now = timezone.now()
            cursor.execute(
                "SELECT o.id, w.listing_id FROM outbox_outbox o JOIN watches_watch w "
                "ON w.id = o.watch_id WHERE o.status IN ('pending', 'retry') AND "
                "o.next_attempt_at <= %s ORDER BY o.next_attempt_at, o.id LIMIT %s",
                [now, batch],
            )
            due = cursor.fetchall()
            if not due:
                break
            ids = [row[0] for row in due]
            marks = ", ".join(["%s"] * len(ids))
            cursor.execute(
                "UPDATE outbox_outbox SET previous_status = status, status = 'sending', "
                "reason = 'claimed', claimed_by = %s, claimed_at = %s, attempts = attempts + 1, "
                f"attempt_started_at = NULL, updated_at = %s WHERE id IN ({marks}) "
                "AND status IN ('pending', 'retry')",
                [holder, now, now, *ids],
            )
            _events(cursor, ids, "sending", "claimed", "NULL", holder, now)
        with transaction.atomic(), connection.cursor() as cursor:
            # The re-fetch's writes, once per listing per cycle (the dispatcher reuses an
            # answer this young): the listing's state, and a price point where it moved.
            listings = sorted({row[1] for row in due} - seen)
            seen.update(listings)
            if listings:
                now = timezone.now()
                lmarks = ", ".join(["%s"] * len(listings))
                cursor.execute(
                    "UPDATE watches_listing SET price = 900, shipping = NULL, in_stock = %s, "
                    "last_polled_at = %s, last_error = '', typical_price = 990, low_90 = 900 "
                    f"WHERE id IN ({lmarks})",
                    [True, now, *listings],
                )
                if world.n == MOVED:
                    cursor.execute(
                        "INSERT INTO watches_pricepoint (listing_id, observed_at, price, "
                        f"shipping, in_stock) SELECT id, %s, 900, NULL, %s FROM watches_listing "
                        f"WHERE id IN ({lmarks})",
                        [now, True, *listings],
                    )
        with transaction.atomic(), connection.cursor() as cursor:
            now = timezone.now()  # the intent, right before the deliveries
            cursor.execute(
                f"UPDATE outbox_outbox SET claimed_at = %s, attempt_started_at = %s WHERE id IN "
                f"({marks}) AND status = 'sending' AND claimed_by = %s AND attempts = 1",
                [now, now, *ids, holder],
            )
        with transaction.atomic(), connection.cursor() as cursor:
            now = timezone.now()
            message = (
                f"{json_object}('title', 'bench item ' || o.id || ' is ¥900', 'body', "
                "'¥900 (your line ¥950)', 'url', '/listings/' || o.id || '/', 'tag', "
                "'watch-' || o.watch_id, 'topic', 'w' || o.watch_id, 'icon', '', 'listing', "
                "o.id, 'price', 900, 'urgency', 'normal')"
            )
            cursor.execute(
                "UPDATE outbox_outbox AS o SET previous_status = status, status = 'sent', "
                "reason = 'delivered', detail = '', claimed_by = '', sent_at = %s, "
                f"sent_message = {message}, updated_at = %s WHERE id IN ({marks}) AND "
                "status = 'sending' AND claimed_by = %s AND attempts = 1 RETURNING id",
                [now, now, *ids, holder],
            )
            won = [row[0] for row in cursor.fetchall()]
            data = (
                f"{json_object}('fresh', {json_object}('item_code', 'bench-' || o.id, 'price', "
                "900, 'shipping', 0, 'in_stock', true, 'observed_at', '2026-12-01T00:00:00'), "
                f"'value', '900', 'line', '950', 'message', {message}, 'fresh_age_seconds', 0.1)"
            )
            _events(cursor, won, "sent", "delivered", data, "", now)
            cursor.execute(
                "UPDATE watches_watch SET last_notified_price = 900, last_notified_at = %s, "
                "last_notified_detected_at = %s "
                f"WHERE id IN (SELECT watch_id FROM outbox_outbox WHERE id IN ({marks}))",
                [now, now, *won],
            )
            sent += len(won)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO outbox_dispatchrun (started_at, finished_at, holder, claimed, sent, "
            "dropped, retry, failed, recovered, error) VALUES (%s, %s, %s, %s, %s, 0, 0, 0, 0, '')",
            [started, timezone.now(), holder, sent, sent],
        )
    assert sent == world.rows, f"floor: {sent} of {world.rows}"


def _events(cursor, ids: list[int], to: str, reason: str, data: str, actor: str, at) -> None:
    """One event per row, from the rows themselves (their previous status), in one INSERT."""
    marks = ", ".join(["%s"] * len(ids))
    cursor.execute(
        "INSERT INTO outbox_outboxevent (outbox_id, from_status, to_status, reason, detail, "
        f"data, actor, at) SELECT o.id, o.previous_status, %s, %s, '', {data}, %s, %s "
        f"FROM outbox_outbox AS o WHERE o.id IN ({marks})",
        [to, reason, actor, at, *ids],
    )


if __name__ == "__main__":
    main()
