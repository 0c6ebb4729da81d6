"""Dispatch throughput: one dispatcher cycle (console channel, listings with 90 days of price
history each, as a real re-fetch meets them) beside its floor, on SQLite and on PostgreSQL (a
database the bench creates and drops), in four worlds:

- 10,000 due rows over 100 listings;
- 2,000 rows over 10 listings, and 2,000 rows over 2,000 listings: how dispatch grows with
  the number of listings (shown for information: no person feels it, so it is no target);
- 2,000 rows over 2,000 listings whose price moved since the poll that detected them (¥900 to
  ¥920, still below the line): every re-fetch writes a price point too — shown beside the
  others.

The re-check takes the path production takes: the Rakuten adapter over HTTP to a fake Ichiba
on 127.0.0.1 in this process (bench/_ichiba.py), through the real rate limiter of one
application id. The listings are offers of products, 20 shops each, so a batch's re-check asks
one page of offers per product (`watches.products.refetch`). The allowance is raised to 10
requests/s, the limiter's and the fake's together, for this bench only: a cycle over 2,000
listings asks one page for each of their 100 products, at Rakuten's 1/s over 100 s of
waiting a cycle (in batches of the offers of 15 products, what one id re-checks while an
answer is fresh), and the bench would measure the wait. 10/s is the same code path with the
larger allowance a documented application gets (Yahoo! Shopping's): a tenth of the waiting,
and batches of OUTBOX_BATCH_SIZE rows in every world. The waiting shows in wall time; CPU
time (`time.process_time`, all threads of this process, less what the fake Ichiba's threads
spent) is what the comparison with the floor reads.

Before each run every listing is as the poll that detected its rows left it two minutes
earlier (`_world.as_the_poll_left_them`): polled, statistics computed, its price and last
point ¥900. The dispatcher asks the marketplace again (older than OUTBOX_REFETCH_MAX_AGE),
folds the answer into those statistics, and writes a point only where the price moved — at
the fake Ichiba, the moved world's items answer ¥920.

The floor does the writes the dispatcher does, as raw set-based SQL on the same connection, one
statement per batch each, committed per batch as the dispatcher commits, over the batches the
dispatcher makes (at most OUTBOX_BATCH_SIZE rows, over at most as many re-checks — here a
product's page of offers each — as the id answers while an answer is fresh): select the due
rows and claim them (status, holder, `claimed_at`, `attempts + 1`) with their `claimed` events;
keep the re-fetched listings (price, stock, points, `last_polled_at`, how they were seen,
90-day low) and, where the price moved, a price point, once per listing per cycle; write the
intent (`attempt_started_at`); record the outcomes (`sent`, `sent_at`, `sent_message` as JSON,
fenced by holder and attempt) with their `delivered` events (the fresh value and the message as
JSON); move the watches' baselines; and a DispatchRun. What it leaves out is what only the
dispatcher needs: reading the rows, history and watches, asking the marketplace, judging,
building messages, threads — so the ratio says what that costs beside the writes.

Rounds alternate ours / floor world by world (A/B/A/B…) over the same rows, reset between runs,
and the two worlds of 2,000 rows take turns going first; the figures are medians, a
ratio the median of the per-round ratios. It prints the marketplace requests of a cycle, the
fake's CPU time taken out, and how many requests the fake refused (429): it must refuse none.

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
PRICE, MOVED_PRICE = 900, 920  # what the poll saw; what the moved world's items answer now
POINTS = 8  # what the fake's pointRate 1 gives on either price, tax excluded
# Requests a second of the one application id, the limiter's and the fake Ichiba's: ten times
# Rakuten's, so the cycles of 2,000 listings are not a wait (see the docstring).
ALLOWANCE = 10
# A cycle that did not send every row — a request the fake refused, say, having reached it
# a moment late, in the next wall-clock second with that second's ten — is not comparable:
# it is said and measured again, at most this many times, after the hold-off the fake's
# Retry-After asks (HOLD_OFF seconds).
AGAIN, HOLD_OFF = 2, 1
# 90 days of history, a point every 3 hours (what POLL_HISTORY_MIN_MINUTES keeps of a quiet
# listing): 720 points a listing.
HISTORY_DAYS, POINTS_PER_DAY = 90, 8
FAR = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
# Production settings (DEBUG keeps a log of every query), no demo marketplace, one cycle
# takes every due row.
SETTINGS = {"DEBUG": "0", "DEMO_TICK": "0", "OUTBOX_CYCLE_SECONDS": "3600"}


def main() -> None:
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, each_database

    vendor = sys.argv[-1] if sys.argv[-1] in ("sqlite", "postgresql") else None
    if vendor is None:
        each_database(__file__, [str(ROUNDS)])
        return
    from _ichiba import rakuten_env, start_ichiba

    fake = start_ichiba(ALLOWANCE)
    fake.retry_after = str(HOLD_OFF)
    os.environ.update(SETTINGS)
    os.environ.update(rakuten_env(fake, ALLOWANCE))
    os.environ.pop("RAKUTEN_APP_IDS", None)  # one id: the one rakuten_env gives
    os.environ.pop("REDIS_URL", None)  # one host: its budget is the fleet's
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if vendor == "sqlite":
        django_on_temp_sqlite("dispatch")
    else:
        django_on_temp_postgres("dispatch")
    try:
        run(vendor, fake)
    finally:
        fake.stop()


def run(vendor: str, fake) -> None:
    from _ichiba import offsets
    from django.conf import settings
    from django.db import connection

    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES
    from watches import services

    firsts = offsets([listings for _, listings in WORLDS])
    worlds = [
        build(n, rows, listings, first, fake)
        for n, ((rows, listings), first) in enumerate(zip(WORLDS, firsts, strict=True))
    ]
    # The most re-checks a batch asks for, as the dispatcher reckons them
    # (`outbox.dispatch._within`), and what each row's re-check is (`services.recheck_units`:
    # its product's page of offers): the floor makes the same batches.
    rechecks = services.recheck_capacity(dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE))
    for world in worlds:
        world.units = units_of(world)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # what autovacuum (PostgreSQL) keeps in production
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        built = cursor.fetchone()[0]
    # As a django-q2 worker does at spawn (outbox.apps); the floor's side shares the process.
    freeze_loaded(["outbox.tasks"], WORKER_REGISTRIES)
    wall: dict[tuple[int, str], list[float]] = {}
    cpu: dict[tuple[int, str], list[float]] = {}
    queries: dict[tuple[int, str], int] = {}
    asked: dict[int, list[int]] = {}
    fake_cpu: dict[int, list[float]] = {}
    redone: list[str] = []
    for round_ in range(ROUNDS):
        # The two worlds of 2,000 rows take turns going first, so a machine
        # speeding up or slowing down within a round favours neither.
        order = worlds if round_ % 2 == 0 else [worlds[0], worlds[2], worlds[1], *worlds[3:]]
        for world in order:
            for side, measure in (("ours", ours), ("floor", floor)):
                for _ in range(AGAIN + 1):
                    reset(world, built)
                    requests, marketplace_cpu = len(fake.requests), fake.cpu_seconds
                    refused = fake.too_many
                    try:
                        seconds, cpu_seconds, count = counted(
                            lambda: measure(world, rechecks)  # noqa: B023
                        )
                        break
                    except Incomplete as exc:
                        # Not the cycle the others are: its rows wait for a retry. Said,
                        # counted, and measured again once the hold-off has passed.
                        redone.append(
                            f"{vendor}, round {round_ + 1}, {world.rows:,} rows over "
                            f"{world.listings:,} listings: {exc}; the fake refused "
                            f"{fake.too_many - refused}"
                        )
                        print(f"  measured again — {redone[-1]}", flush=True)
                        time.sleep(HOLD_OFF + 1)
                else:
                    raise SystemExit(f"{vendor}: {AGAIN + 1} incomplete cycles in a row")
                # The fake Ichiba's threads are the marketplace's work, not ours.
                marketplace_cpu = fake.cpu_seconds - marketplace_cpu
                if side == "ours":
                    asked.setdefault(world.n, []).append(len(fake.requests) - requests)
                    fake_cpu.setdefault(world.n, []).append(marketplace_cpu)
                wall.setdefault((world.n, side), []).append(seconds)
                cpu.setdefault((world.n, side), []).append(cpu_seconds - marketplace_cpu)
                queries[(world.n, side)] = count
    print(
        f"\n{vendor}: batch {settings.OUTBOX_BATCH_SIZE} rows over at most {rechecks} re-checks, "
        f"{ROUNDS} rounds (ours / floor alternating), medians; "
        f"{HISTORY_DAYS * POINTS_PER_DAY} price points a listing; one Rakuten id at "
        f"{settings.RAKUTEN_RATE_PER_SECOND:g} requests/s; load {os.getloadavg()[0]:.1f}"
    )
    rates = {}
    for world in worlds:
        ours_s = statistics.median(wall[(world.n, "ours")])
        floor_s = statistics.median(wall[(world.n, "floor")])
        rates[world.n] = wall[(world.n, "ours")]
        ours_cpu = statistics.median(cpu[(world.n, "ours")])
        floor_cpu = statistics.median(cpu[(world.n, "floor")])
        print(
            f"  {world.rows:,} rows over {world.listings:,} listings"
            f"{', prices moved' if world.n == MOVED else ''}: "
            f"ours {world.rows / ours_s:>7,.0f} rows/s, "
            f"floor {world.rows / floor_s:>7,.0f} rows/s; a CPU second: ours "
            f"{world.rows / ours_cpu:,.0f} rows, floor {world.rows / floor_cpu:,.0f}; "
            f"queries a row {queries[(world.n, 'ours')] / world.rows:.3f} / "
            f"{queries[(world.n, 'floor')] / world.rows:.3f}; marketplace requests a cycle "
            f"{statistics.median(asked[world.n]):.0f} (the fake's CPU taken out: "
            f"{statistics.median(fake_cpu[world.n]) * 1000:.0f} ms)\n"
            f"    ratio ours / floor, wall: {ratio(wall, world.n)}\n"
            f"    ratio ours / floor, CPU:  {ratio(cpu, world.n)}"
        )
    # Same rows, 2,000 listings against 10: each round's ratio of rates (time over time);
    # in CPU time too, which another tenant of a shared machine disturbs less.
    for n, label in ((2, "2,000 listings"), (MOVED, "2,000 listings, prices moved")):
        for kind, times in (
            ("wall, waits for the budget included", rates),
            ("CPU", {k: cpu[(k, "ours")] for k in rates}),
        ):
            per_round = [f / m for f, m in zip(times[1], times[n], strict=True)]
            rounds = ", ".join(f"{r:.2f}" for r in per_round)
            print(
                f"  {label} / 10 listings (ours, same 2,000 rows), {kind}: "
                f"{statistics.median(per_round):.2f}×  (per round: {rounds})",
                flush=True,
            )
    busiest = fake.max_per_second()
    print(
        f"  fake Ichiba: {len(fake.requests)} requests, at most "
        f"{max(busiest.values(), default=0)} in one second of the id (allowance "
        f"{fake.per_second}), {fake.too_many} refused (429); cycles measured again: "
        f"{len(redone)}",
        flush=True,
    )
    for line in redone:
        print(f"    {line}")


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
        self.price = MOVED_PRICE if n == MOVED else PRICE  # what a re-fetch finds
        self.units: dict[int, tuple] = {}  # listing id -> the re-check that answers it


def units_of(world: World) -> dict[int, tuple]:
    """The re-check that answers each of `world`'s listings, by the dispatcher's rule."""
    from watches import services
    from watches.models import Watch

    listing_of = dict(
        Watch.objects.filter(device_id=world.device_id).values_list("id", "listing_id")
    )
    units = services.recheck_units(listing_of)
    return {listing_of[watch]: unit for watch, unit in units.items()}


def build(n: int, rows: int, listing_count: int, first: int, fake) -> World:
    """`listing_count` Rakuten offers at ¥900 (offers `first`… at the fake Ichiba, ¥920 there
    in the world whose price moved) with their history, one console device, `rows`
    target-price watches (¥950) over the listings, one due row each."""
    from _ichiba import rakuten_offers, stock
    from _world import due_rows, with_history

    from watches.models import Channel, Device

    codes = stock(fake, listing_count, PRICE, first)
    if n == MOVED:
        for code in codes:
            fake.set(code, price=MOVED_PRICE)
    offers = rakuten_offers(listing_count, PRICE, first)
    listings = with_history(offers, HISTORY_DAYS, POINTS_PER_DAY)
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
    as_the_poll_left_them(now, built)
    settle()


class Incomplete(Exception):
    """A cycle that did not send every row."""


def ours(world: World, rechecks: int | None) -> None:
    from collections import Counter

    from outbox.dispatch import run_cycle
    from outbox.models import OutboxEvent

    result = run_cycle()
    if result.as_json()["sent"] != world.rows:
        why = Counter(OutboxEvent.objects.filter(to_status="retry").values_list("reason", "detail"))
        raise Incomplete(f"{result.as_json()} of {world.rows}, retried for {dict(why)}")


def floor(world: World, rechecks: int | None) -> None:
    """The dispatcher's writes for `world`'s due rows, set-based, batch by batch: each batch
    the rows the dispatcher's would hold — the oldest due, over at most `rechecks` re-checks."""
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    json_object = "json_build_object" if connection.vendor == "postgresql" else "json_object"
    holder, started = "floor", timezone.now()
    price, net = world.price, world.price - POINTS
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
            if rechecks is not None:
                due = _within(due, rechecks, world.units)
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
                # The columns the re-fetch writes of an offer on a page of offers: the
                # answer's price, shipping, stock and points, how it was seen, and the
                # 90-day lows lowered to the answer where it is lower.
                cursor.execute(
                    "UPDATE watches_listing SET price = %s, shipping = 0, in_stock = %s, "
                    "points = %s, points_until = NULL, points_after = NULL, point_rate = NULL, "
                    "member_points = 0, last_polled_at = %s, last_error = '', "
                    "seen_via = 'product', "
                    "low_90 = CASE WHEN low_90 IS NULL OR low_90 > %s THEN %s ELSE low_90 END, "
                    "low_90_net = CASE WHEN low_90_net IS NULL OR low_90_net > %s THEN %s "
                    f"ELSE low_90_net END WHERE id IN ({lmarks})",
                    [price, True, POINTS, now, price, price, net, net, *listings],
                )
                if world.n == MOVED:
                    cursor.execute(
                        "INSERT INTO watches_pricepoint (listing_id, observed_at, price, "
                        "shipping, in_stock, points) SELECT id, %s, %s, 0, %s, %s FROM "
                        f"watches_listing WHERE id IN ({lmarks})",
                        [now, price, True, POINTS, *listings],
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
                f"{json_object}('title', 'bench item ' || o.id || ' is ¥{price}', 'body', "
                f"'¥{price} (your line ¥950)', 'url', '/listings/' || o.id || '/', 'tag', "
                "'watch-' || o.watch_id, 'topic', 'w' || o.watch_id, 'icon', '', 'listing', "
                f"o.id, 'price', {price}, 'urgency', 'normal')"
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
                f"{price}, 'shipping', 0, 'in_stock', true, 'observed_at', "
                f"'2026-12-01T00:00:00'), 'value', '{price}', 'line', '950', 'message', "
                f"{message}, 'fresh_age_seconds', 0.1)"
            )
            _events(cursor, won, "sent", "delivered", data, "", now)
            cursor.execute(
                "UPDATE watches_watch SET last_notified_price = %s, last_notified_at = %s, "
                "last_notified_detected_at = %s "
                f"WHERE id IN (SELECT watch_id FROM outbox_outbox WHERE id IN ({marks}))",
                [price, now, now, *won],
            )
            sent += len(won)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO outbox_dispatchrun (started_at, finished_at, holder, claimed, sent, "
            "dropped, retry, failed, recovered, error) VALUES (%s, %s, %s, %s, %s, 0, 0, 0, 0, '')",
            [started, timezone.now(), holder, sent, sent],
        )
    assert sent == world.rows, f"floor: {sent} of {world.rows}"


def _within(
    due: list[tuple[int, int]], rechecks: int, units: dict[int, tuple]
) -> list[tuple[int, int]]:
    """The rows of `due` (id, listing id; oldest first) the dispatcher's batch holds
    (`outbox.dispatch._within`): the oldest, and every later one whose re-check (`units`, by
    listing) is already paid for, over at most `rechecks` re-checks."""
    paid: set[tuple] = set()
    kept: list[tuple[int, int]] = []
    for row in due:
        unit = units[row[1]]
        if unit not in paid:
            if len(paid) >= rechecks and kept:
                continue
            paid.add(unit)
        kept.append(row)
    return kept


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
