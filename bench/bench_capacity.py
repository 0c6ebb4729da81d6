#!/usr/bin/env python
"""Capacity: how much of a marketplace's allowance polling turns into fresh prices and timely
detections, with the poll plan and with the old oldest-first order, for 1 and 4 Rakuten
application ids at 1 request/s each.

The world (bench/_capacity_world.py): 100,000 listings and 1,000,000 target-price watches
(5 % of listings unwatched, most 1-3 watches, 400 popular ones sharing the rest; targets
0.5-30 % below the price, most within 8 %), each listing's true price a random walk on a
simulated clock (calm, normal or jumpy) with occasional sales of 8-30 % for 30 min to 3 h.
Every scenario starts from the same database state and sees the same prices.

Real (the production code, on the bench's own SQLite database, or PostgreSQL with
`--db postgresql`, created and dropped by the bench):
- the poll plan: `watches.polling.plan.plan` over `watches.polling.poll.due_listings`,
  with the run's budget from `plan.run_budget` (rate × min(POLL_MAX_SECONDS,
  60 × POLL_EVERY_MINUTES) × (1 − POLL_REFETCH_SHARE)), a run every POLL_EVERY_MINUTES,
  with the default settings;
- the oldest-first baseline: the order polling used before the plan,
  `due_listings` (least recently checked first, no priority), given the same requests;
- the Rakuten adapter (`watches.polling.observations.fetch`): real HTTP to a fake Ichiba on
  127.0.0.1, through the real `Budget` of `RateLimiter`s, one per application id;
- the observation rule (`watches.polling.observations.observe` and its save): the listing's last
  seen price, last_polled_at, typical price and 90-day low, price points — what the plan
  reads at the next run;
- the coverage figures: `pollplan.watched_coverage`, the function admin's overview shows;
- with `--judge real`: judging and enqueue too (`polling.poll` / `polling.poll_batch`:
  `triggers.detect`, `outbox.enqueue.enqueue_many`); the detection is then the outbox row.

Simulated:
- time: one simulated clock drives the limiters (a wait moves it instead of sleeping),
  Django's clock (time-machine) and the fake Ichiba, which answers each item's true price at
  that moment and counts requests per application id per simulated second (a 2nd in one
  second would be answered 429 and counted);
- by default (`--judge sim`), judging: for a target-price watch with nothing delivered yet,
  `detect` fires exactly when an in-stock observation is at or below the target, so the
  bench takes the first such observation (at its batch's enqueue time, as enqueue_many's
  `created_at`) instead of loading a popular listing's 2,000 watches at every poll — the
  full path takes several times the 10-minute budget at 1,000,000 watches. The smoke test
  (tests/test_bench_capacity.py) runs both at a small size and checks they agree;
- the dispatcher is not run: its re-fetches would spend the share polling leaves
  (POLL_REFETCH_SHARE); detection delay is the true crossing → the enqueue of its row.

    .venv/bin/python bench/bench_capacity.py [--listings 100000] [--watches 1000000]
        [--hours 3] [--ids 1,4] [--judge sim|real] [--db sqlite|postgresql] [--seed 1]
        [--every-minutes POLL_EVERY_MINUTES]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _capacity_runs import APP_IDS, RATE, T0, Fixed, Row, run_scenario

GOAL = 0.95


class SimClock:
    """Simulated time: limiters read and sleep on it; Django's clock follows (time-machine)."""

    def __init__(self) -> None:
        import time_machine

        self.now = T0.timestamp()
        self._travel = time_machine.travel(T0, tick=False)
        self._coordinates = self._travel.start()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self._coordinates.shift(seconds)

    def move_to(self, timestamp: float) -> None:
        self.now = timestamp
        self._coordinates.move_to(dt.datetime.fromtimestamp(timestamp, dt.UTC))

    def stop(self) -> None:
        self._travel.stop()


def fake_ichiba(world, clock: SimClock, rate: float):
    """The fake Ichiba (tests/fakes/ichiba.py) answering each item's true price now, and
    enforcing `rate` requests per application id per simulated second."""
    from tests.fakes.ichiba import FakeIchiba, ichiba_item

    class SimIchiba(FakeIchiba):
        def __init__(self) -> None:
            super().__init__()
            self.accept(*APP_IDS)
            self.by_code = {item.code: item for item in world.listings}
            self.by_second: Counter[tuple[str, int]] = Counter()
            self.too_many = 0

        def answer(self, request):
            key = (request.query.get("applicationId", ""), math.floor(clock.now))
            code = request.query.get("itemCode", "")
            with self.lock:
                self.by_second[key] += 1
                over = self.by_second[key] > rate
                self.too_many += over
                item = self.by_code.get(code)
                if item is not None:
                    price = item.price_at(clock.now - T0.timestamp())
                    self.items[code] = ichiba_item(code, price=price)
            return super().answer(
                dataclasses.replace(request, fault="rate_limited") if over else request
            )

    return SimIchiba().start()


def main(argv: list[str] | None = None) -> list[Row]:
    args = _arguments(argv)
    os.environ.setdefault("DEBUG", "0")  # DEBUG would keep every query in memory
    os.environ.setdefault("DEMO_TICK", "0")
    from tests.fakes.ichiba import key_for

    os.environ["RAKUTEN_APP_ID"] = APP_IDS[0]
    os.environ["RAKUTEN_ACCESS_KEY"] = key_for(APP_IDS[0])
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, postgres_available

    if args.db == "postgresql":
        if not postgres_available():
            sys.exit("PostgreSQL is not reachable ($BENCH_PG_URL)")
        django_on_temp_postgres("capacity")
    else:
        django_on_temp_sqlite("capacity")
    from django.conf import settings
    from django.test import override_settings

    every = args.every_minutes or settings.POLL_EVERY_MINUTES
    with override_settings(POLL_EVERY_MINUTES=every):
        return simulate(args.listings, args.watches, args.hours, args.ids, args.judge, args.seed)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listings", type=int, default=100_000)
    parser.add_argument("--watches", type=int, default=None, help="default: 10 per listing")
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--ids", default="1,4", help="application id counts, e.g. 1,4")
    parser.add_argument("--judge", choices=("sim", "real"), default="sim")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--every-minutes", type=int, default=None, help="default: POLL_EVERY_MINUTES"
    )
    args = parser.parse_args(argv)
    args.watches = args.watches if args.watches is not None else 10 * args.listings
    args.ids = [int(n) for n in args.ids.split(",")]
    if not args.ids or max(args.ids) > len(APP_IDS) or min(args.ids) < 1:
        parser.error(f"--ids: between 1 and {len(APP_IDS)} each")
    return args


def simulate(
    listings: int, watches: int, hours: float, ids: list[int], judge: str, seed: int = 1
) -> list[Row]:
    """Build the world in the database Django is connected to, run every scenario (ids ×
    plan/oldest-first, interleaved), print the table and the advice; return the rows."""
    from _capacity_world import build_world, crossings, write_world
    from django.conf import settings
    from django.test import override_settings

    from tests.fakes.ichiba import key_for
    from watches.marketplaces.ratelimit import forget_limiter

    started = time.monotonic()
    world = build_world(listings, watches, hours, seed)
    watch_ids = write_world(world, T0, seed)
    crossed = dict(zip(watch_ids, crossings(world), strict=True))
    print(
        f"world: {listings:,} listings ({world.watched():,} watched), {len(watch_ids):,} "
        f"watches, {hours:g} simulated hours; built in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    fixed = Fixed()
    clock = SimClock()
    fake = fake_ichiba(world, clock, RATE)
    rows = []
    try:
        with override_settings(
            RAKUTEN_APP_ID=APP_IDS[0],
            RAKUTEN_ACCESS_KEYS={app_id: key_for(app_id) for app_id in APP_IDS},
            RAKUTEN_RATE_PER_SECOND=RATE,
            RAKUTEN_API_URL=fake.url,
            MARKETPLACE_ADAPTERS={
                **settings.MARKETPLACE_ADAPTERS,
                "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
            },
        ):
            for count in ids:
                for order in ("plan", "oldest-first"):
                    rows.append(
                        run_scenario(world, crossed, count, order, judge, clock, fake, fixed)
                    )
                    print(_line(rows[-1]), flush=True)
    finally:
        fake.stop()
        clock.stop()
        for app_id in APP_IDS:
            forget_limiter(f"rakuten:{app_id}", RATE)
    print_table(rows, world.watched(), hours)
    print_advice(rows, world.watched())
    print(f"total {time.monotonic() - started:.0f} s")
    return rows


def _line(row: Row) -> str:
    return f"  {row.ids} id(s), {row.order}: {row.requests:,} requests, {row.wall:.0f} s"


def _minutes(seconds: float | None) -> str:
    return "missed" if seconds is None else f"{seconds / 60:.0f} min"


def print_table(rows: list[Row], watched: int, hours: float) -> None:
    print(f"\nwatched listings: {watched:,}; {hours:g} simulated hours; coverage sampled every")
    print("30 min from the first hour on (pollplan.watched_coverage); delay: true crossing →")
    print("enqueue, over every watch whose target was crossed ('missed': never detected)\n")
    print(
        "| ids | order | requests (of allowance) | checked ≤ 15 min | ≤ 1 h | never checked "
        "| crossed | detected | delay p50 | p95 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.ids} | {row.order} | {row.requests:,} ({row.requests / row.allowance:.0%}) "
            f"| {row.within_15m:.2%} | {row.within_1h:.2%} "
            f"| {row.never_checked / row.watched:.0%} | {row.crossed:,} "
            f"| {row.detected / max(1, row.crossed):.1%} | {_minutes(row.p50)} "
            f"| {_minutes(row.p95)} |"
        )
    busiest = max(row.busiest_second for row in rows)
    print(f"\nfake Ichiba: at most {busiest} request(s) per id in any simulated second, ", end="")
    print(f"{sum(row.too_many for row in rows)} answered 429")


def print_advice(rows: list[Row], watched: int) -> None:
    """What to buy. The plan spends OLDEST_SHARE of each run on the watched listings checked
    longest ago: that share alone keeps `share × requests/h ÷ goal` listings within the hour
    (the rest goes to the listings near a line, again and again). Given for the requests one
    id gives polling as configured, and when runs come back to back (a run every
    POLL_MAX_SECONDS, the default): rate × 3,600 × (1 − POLL_REFETCH_SHARE) an hour."""
    from django.conf import settings

    from watches.polling.plan import OLDEST_SHARE

    hours = rows[0].allowance / rows[0].ids / RATE / 3600
    spent = max(row.requests / row.ids / hours for row in rows)
    full = RATE * 3600 * (1 - settings.POLL_REFETCH_SHARE)
    keeps = OLDEST_SHARE * spent / GOAL, OLDEST_SHARE * full / GOAL
    print(f"\nwhat to buy, for {GOAL:.0%} of the watched listings checked within 1 h or 15 min:")
    print(f"one id gives polling {spent:,.0f} requests/h as configured ", end="")
    print(f"(POLL_EVERY_MINUTES={settings.POLL_EVERY_MINUTES}), {full:,.0f}/h back to back;")
    print(f"the plan's oldest quarter keeps {keeps[0]:,.0f} / {keeps[1]:,.0f} listings within")
    print("the hour (oldest-first would need a quarter as many ids, and detect later)")
    print("| watched listings | ids as configured: 1 h | 15 min | back to back: 1 h | 15 min |")
    print("|---|---|---|---|---|")
    for listings in sorted({1_000, 10_000, 100_000, watched}):
        need = [
            math.ceil(GOAL * listings / (OLDEST_SHARE * rate * window))
            for rate in (spent, full)
            for window in (1.0, 0.25)
        ]
        print(f"| {listings:,} | {need[0]} | {need[1]} | {need[2]} | {need[3]} |")


if __name__ == "__main__":
    main()
