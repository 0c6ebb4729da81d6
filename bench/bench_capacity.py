#!/usr/bin/env python
"""Capacity: what one application id per marketplace (Rakuten Ichiba, 1 request/s; Yahoo!
Shopping, 1 query/s) turns into fresh prices and timely detections, with today's plan (one item
a request: POLL_SHAPES item) beside the new one (items, shops' pages and products' offers:
every shape), at 1,000 / 10,000 / 100,000 watched listings; then how the new plan fares when
the world's shops and edits differ. Each marketplace gets a world of its own, drawn alike
(`--marketplaces`): its tables and targets are printed apart.

The world (bench/_capacity_world.py, `Params`; the reasons are in docs/capacity.md):
- watched listings drawn from 5,000 shops by a Zipf law (exponent 1: the shop of rank k holds
  a share ∝ 1/k; at 100,000 the largest holds about 11 %, half the shops under 7);
- each shop's catalogue 20 × its watched listings, the rest unwatched but updated too: their
  update times move at the same mean rate as a watched listing's (price moves and sales,
  and other edits), drawn for the shop as a whole;
- prices: per item a random walk (half calm, moving every 72 h on average; 35 % every
  24 h; 15 % jumpy, every 6 h) and sales (8-30 % off for 30 min to 3 h; 12 % of items in
  6 h, 30 % of the popular ones); stock is not modelled (every item in stock);
- an item's update time moves on each price move, a sale's start and end, and on other
  edits — once per 48 h on average by default (`--edit-hours`; `never`);
- 30 % of watched listings are offers of a product (a JAN code) sold by 2-20 shops, every
  offer a watched listing;
- 10 target-price watches per watched listing: most listings 1-3, 400 in 100,000 popular
  ones sharing the rest; targets 0.5-30 % below the price at T0, most within 8 %;
- the first `--warmup-hours` (1) let the plan learn the shops' feeds: requests, prices
  observed, coverage and crossings are counted after it; crossings only up to
  `--tail-hours` (1) before the end, so that each has that long to be detected (the p95
  target is an hour).

At 100,000 watched listings a scenario takes some 7 minutes at 3 simulated hours; the
sensitivity table (four more worlds, both plans) another hour: `--sensitivity-listings 10000`
gives it in a quarter of an hour.

Real (the production code, on the bench's own SQLite database, or PostgreSQL with
`--db postgresql`, created and dropped by the bench):
- the entry point of a polling run, `watches.polling.poll.poll`, every POLL_EVERY_MINUTES
  with POLL_MAX_SECONDS and the default settings, POLL_SHAPES set per plan: the plan, its
  budget, its batches of items, shop pages (`feeds.poll_shops`, learning each shop's pace)
  and products' offers (`products.polling.poll_product_batch`);
- the Rakuten adapter over real HTTP to a fake Ichiba on 127.0.0.1 — or the Yahoo! Shopping
  adapter to a fake Yahoo — through the real `RateLimiter` of the one application id; the
  observation rule and its save; the feeds' trust check (`FeedCheck`). Yahoo! Shopping
  documents no sort of a store's items by update time: its store pages come in review-count
  order (the adapter's), so a page shows 50 items' prices now and proves nothing unchanged.

Simulated:
- time: one clock drives the limiter (a wait moves it instead of sleeping), Django's clock
  (time-machine) and the fake marketplace, which answers from the world as it stands at that
  moment — an item's price; a shop's items most recently updated first (Rakuten's
  `sort=-updateTimestamp`) or in a fixed order (Yahoo's by review count), paged; a JAN
  code's offers cheapest first — and counts requests
  per application id per simulated second (a 2nd in one second is answered 429);
- by default (`--judge sim`), the judging of listing watches: for a target-price watch with
  nothing delivered yet, `detect` fires exactly when an in-stock observation is at or below
  the target, so the bench takes the first such observation (at its batch's enqueue time)
  instead of loading a popular listing's 2,000 watches at every answer. Everything else in
  the run is real. The smoke test (tests/test_bench_capacity.py) runs both at a small size
  and checks they agree;
- the dispatcher is not run: its re-checks spend the share polling leaves
  (POLL_REFETCH_SHARE); the delay is the true crossing → the enqueue of its row.

The bound: a plan that knew in advance when each listing crosses a target would spend one
request at that moment, the moments that cross most watches first, and detect at once; with
the new plan's requests it detects the share printed as "bound".

    .venv/bin/python bench/bench_capacity.py [--sizes 1000,10000,100000] [--shops 5000]
        [--hours 3] [--warmup-hours 1] [--tail-hours 1] [--edit-hours 48|never]
        [--sensitivity-listings N]
        [--no-sensitivity] [--judge sim|real] [--db sqlite|postgresql] [--seed 1]
        [--marketplaces rakuten,yahoo]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _capacity_runs import APP_IDS, PLANS, RATE, T0, Fixed, Row, run_scenario
from _capacity_world import MARKETPLACE_NAMES, UNWATCHED_PRICE, UPDATE_LINE, Params, World
from _clock import SimClock

# Targets at 100,000 watched listings, one id, the default world.
TARGET_DETECTED, TARGET_P50, TARGET_P95 = 0.90, 15 * 60, 60 * 60
BOUND_SHARE = 0.80  # of the oracle's detections, where the world makes a target unreachable
SENSITIVITY_SHOPS = (200, 5_000, 20_000)
SENSITIVITY_EDITS: tuple[float | None, ...] = (6.0, 48.0, None)


ADAPTERS = {
    "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
    "yahoo": "watches.marketplaces.yahoo.YahooMarketplace",
}


class Simulated:
    """What both simulated fakes add to theirs: the world they answer from, and the requests
    counted per application id and per shape in each simulated second."""

    lock: threading.Lock  # the fake's (tests/fakes/server.py)

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.by_code: dict[str, int] = {}
        self.shop_index: dict[str, int] = {}
        self.by_second: Counter[tuple[str, int]] = Counter()
        self.shapes: Counter[tuple[str, int]] = Counter()  # (shape, second)
        self.too_many = 0

    def use(self, world: World) -> None:
        with self.lock:
            self.world = world
            self.by_code = {item.code: n for n, item in enumerate(world.items)}
            self.shop_index = {shop.code: n for n, shop in enumerate(world.shops)}

    def over(self, app_id: str, shape: str, clock: SimClock, rate: float) -> bool:
        """Count a request of `app_id` of `shape` now; True when it is one more than `rate`
        in its simulated second (the marketplace answers it 429)."""
        key = (app_id, math.floor(clock.now))
        with self.lock:
            self.by_second[key] += 1
            over = self.by_second[key] > rate
            self.too_many += over
            self.shapes[(shape, key[1])] += 1
        return over


def fake_marketplace(marketplace: str, clock: SimClock, rate: float):
    """The fake of `marketplace` answering from a world as it stands now."""
    return (fake_ichiba if marketplace == "rakuten" else fake_yahoo)(clock, rate)


def fake_ichiba(clock: SimClock, rate: float):
    """The fake Ichiba (tests/fakes/ichiba.py: its checks of path, key and parameters, its
    answers' shape) answering from `world` (set before each world's scenarios) as it stands
    now, enforcing `rate` requests per application id per simulated second."""
    from tests.fakes.ichiba import FakeIchiba, _json, _page, ichiba_item

    class SimIchiba(Simulated, FakeIchiba):
        def __init__(self) -> None:
            super().__init__()
            self.accept(APP_IDS["rakuten"])

        def answer(self, request):
            refused = self._refused(request)
            if refused is not None:
                return refused
            query = request.query
            shape = next(n for n in ("itemCode", "shopCode", "keyword") if query.get(n))
            if self.over(query.get("applicationId", ""), SHAPE_OF[shape], clock, rate):
                return super().answer(dataclasses.replace(request, fault="rate_limited"))
            hits, page = int(query.get("hits", 30)), int(query.get("page", 1))
            items, total = self._found(query, hits, page, clock.now - T0.timestamp())
            return _json(200, _page([ichiba_item(c, price=p) for c, p in items], total, page, hits))

        def _found(
            self, query: dict[str, str], hits: int, page: int, seconds: float
        ) -> tuple[list[tuple[str, int]], int]:
            world = self.world
            assert world is not None  # set before any scenario asks
            if query.get("itemCode"):
                n = self.by_code.get(query["itemCode"])
                if n is None or page > 1:
                    return [], 0 if n is None else 1
                return [(query["itemCode"], world.items[n].price_at(seconds))], 1
            if query.get("shopCode"):
                index = self.shop_index.get(query["shopCode"])
                if index is None:
                    return [], 0
                shop = world.shops[index]
                out = []
                for i in world.shop_page(shop, seconds, page, hits):
                    if i < len(shop.watched):
                        item = world.items[shop.watched[i]]
                        out.append((item.code, item.price_at(seconds)))
                    else:
                        out.append((f"{shop.code}:u{i}", UNWATCHED_PRICE))
                return out, shop.size
            return _offers(world, query.get("keyword", ""), (page - 1) * hits, hits, seconds)

    return SimIchiba().start()


# The fakes' request parameters → the shape of request they ask.
SHAPE_OF = {"itemCode": "item", "shopCode": "shop", "keyword": "product"}


def fake_yahoo(clock: SimClock, rate: float):
    """The fake Yahoo! Shopping (tests/fakes/yahoo.py: its checks of the appid, `results`,
    `start` and `sort`, its hits' shape) answering from `world` as it stands now, enforcing
    `rate` queries per appid per simulated second: an item within its store
    (`seller_id` + `query`), a store's items by review count (`seller_id`: an order unrelated
    to change, the same for every read), a JAN code's offers in stock, cheapest first."""
    import random

    from tests.fakes.yahoo import FakeYahoo, _json, yahoo_hit, yahoo_page

    class SimYahoo(Simulated, FakeYahoo):
        def __init__(self) -> None:
            super().__init__()
            self.app_ids = {APP_IDS["yahoo"]}
            self.orders: dict[int, list[int]] = {}  # a store's catalogue by review count

        def use(self, world: World) -> None:
            super().use(world)
            with self.lock:
                self.orders.clear()

        def answer(self, request):
            refused = self._refused(request)
            if refused is not None:
                return refused
            query = request.query
            seller, words, jan = (query.get(n, "") for n in ("seller_id", "query", "jan_code"))
            shape = "product" if jan else "item" if seller and words else "shop"
            if self.over(query.get("appid", ""), shape, clock, rate):
                return super().answer(dataclasses.replace(request, fault="rate_limited"))
            start, results = int(query.get("start", "1")), int(query.get("results", "20"))
            seconds = clock.now - T0.timestamp()
            world = self.world
            assert world is not None  # set before any scenario asks
            if shape == "product":
                found, total = _offers(world, jan, start - 1, results, seconds)
            elif shape == "item":
                n = self.by_code.get(f"{seller}_{words}")
                found = [] if n is None or start > 1 else [self._priced(world, n, seconds)]
                total = 0 if n is None else 1
            else:
                found, total = self._store_page(world, seller, start - 1, results, seconds)
            hits = [
                yahoo_hit(code, price=price, jan=self._jan(world, code)) for code, price in found
            ]
            return _json(200, yahoo_page(hits, total, start, words))

        def _priced(self, world: World, n: int, seconds: float) -> tuple[str, int]:
            return world.items[n].code, world.items[n].price_at(seconds)

        def _jan(self, world: World, code: str) -> str:
            n = self.by_code.get(code)
            return "" if n is None else world.items[n].jan

        def _store_page(
            self, world: World, seller: str, skip: int, results: int, seconds: float
        ) -> tuple[list[tuple[str, int]], int]:
            index = self.shop_index.get(seller)
            if index is None:
                return [], 0
            shop = world.shops[index]
            with self.lock:
                order = self.orders.get(index)
                if order is None:
                    order = random.Random(index).sample(range(shop.size), shop.size)
                    self.orders[index] = order
            out = []
            for i in order[skip : skip + results]:
                if i < len(shop.watched):
                    out.append(self._priced(world, shop.watched[i], seconds))
                else:
                    out.append((f"{shop.code}_u{i}", UNWATCHED_PRICE))
            return out, shop.size

    return SimYahoo().start()


def _offers(
    world: World, jan: str, skip: int, count: int, seconds: float
) -> tuple[list[tuple[str, int]], int]:
    """A JAN code's offers (all in stock), cheapest first: `count` of them after `skip`, and
    how many there are."""
    offers = world.products.get(jan, [])
    found = sorted((world.items[n].price_at(seconds), world.items[n].code) for n in offers)
    return [(code, price) for price, code in found[skip : skip + count]], len(found)


def main(argv: list[str] | None = None) -> list[Row]:
    args = _arguments(argv)
    os.environ.setdefault("DEBUG", "0")  # DEBUG would keep every query in memory
    os.environ.setdefault("DEMO_TICK", "0")
    from tests.fakes.ichiba import key_for

    # Start-up (settings) with both marketplaces configured; each world then keeps only its own.
    os.environ["RAKUTEN_APP_ID"] = APP_IDS["rakuten"]
    os.environ["RAKUTEN_ACCESS_KEY"] = key_for(APP_IDS["rakuten"])
    os.environ["YAHOO_APP_ID"] = APP_IDS["yahoo"]
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, postgres_available

    if args.db == "postgresql":
        if not postgres_available():
            sys.exit("PostgreSQL is not reachable ($BENCH_PG_URL)")
        django_on_temp_postgres("capacity")
    else:
        django_on_temp_sqlite("capacity")
    rows: list[Row] = []
    for marketplace in args.marketplaces:
        base = Params(
            shops=args.shops,
            hours=args.hours,
            seed=args.seed,
            edit_hours=args.edit_hours,
            marketplace=marketplace,
        )
        worlds = [(dataclasses.replace(base, listings=n), base.edit_hours) for n in args.sizes]
        if args.sensitivity:
            at = dataclasses.replace(base, listings=args.sensitivity_listings)
            worlds += [(dataclasses.replace(at, shops=n), at.edit_hours) for n in SENSITIVITY_SHOPS]
            worlds += [(dataclasses.replace(at, edit_hours=e), e) for e in SENSITIVITY_EDITS]
        rows += simulate(worlds, args.judge, args.warmup_hours, len(args.sizes), args.tail_hours)
    return rows


def _edit_hours(value: str) -> float | None:
    return None if value == "never" else float(value)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="watched listings")
    parser.add_argument("--shops", type=int, default=Params.shops)
    parser.add_argument("--hours", type=float, default=Params.hours)
    parser.add_argument("--warmup-hours", type=float, default=1.0)
    parser.add_argument("--tail-hours", type=float, default=1.0)
    parser.add_argument("--edit-hours", type=_edit_hours, default=Params.edit_hours)
    parser.add_argument(
        "--sensitivity-listings", type=int, default=None, help="default: largest size"
    )
    parser.add_argument("--no-sensitivity", dest="sensitivity", action="store_false")
    parser.add_argument("--judge", choices=("sim", "real"), default="sim")
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--marketplaces", default="rakuten,yahoo", help="one world of each, one id each"
    )
    args = parser.parse_args(argv)
    args.sizes = [int(n) for n in args.sizes.split(",")]
    args.marketplaces = args.marketplaces.split(",")
    if not set(args.marketplaces) <= set(ADAPTERS):
        parser.error(f"--marketplaces: one or more of {', '.join(ADAPTERS)}")
    args.sensitivity_listings = args.sensitivity_listings or max(args.sizes)
    if args.warmup_hours + args.tail_hours >= args.hours:
        parser.error("--hours must be longer than --warmup-hours and --tail-hours together")
    return args


def label(params: Params, edit_hours: float | None) -> str:
    edits = "never" if edit_hours is None else f"{edit_hours:g} h"
    return f"{params.listings:,} in {params.shops:,} shops, edits {edits}"


def simulate(
    worlds: list[tuple[Params, float | None]],
    judge: str,
    warmup_hours: float,
    sizes: int,
    tail_hours: float = 0.0,
) -> list[Row]:
    """Build each world (the first `sizes` make the size table, the rest the sensitivity
    table) in the database Django is connected to (one at a time; worlds that
    differ only in their edits share it), run today's plan and the new one on it in turn,
    print the tables; return the rows."""
    from _capacity_world import (
        build_world,
        clear_world,
        crossings,
        describe,
        set_updates,
        write_world,
    )
    from django.test import override_settings

    from tests.fakes.ichiba import key_for
    from watches.marketplaces.ratelimit import forget_limiter

    started = time.monotonic()
    marketplace = worlds[0][0].marketplace
    app_id = APP_IDS[marketplace]
    clock = SimClock(T0)
    fake = fake_marketplace(marketplace, clock, RATE)
    rows: list[Row] = []
    done: dict[str, Row] = {}
    written: Params | None = None
    world = None
    crossed: dict[int, float | None] = {}
    fixed = None
    warmup, tail = warmup_hours * 3600, tail_hours * 3600
    try:
        with override_settings(
            RAKUTEN_APP_ID=APP_IDS["rakuten"],
            RAKUTEN_APP_IDS=[APP_IDS["rakuten"]],
            RAKUTEN_ACCESS_KEYS={APP_IDS["rakuten"]: key_for(APP_IDS["rakuten"])},
            RAKUTEN_RATE_PER_SECOND=RATE,
            YAHOO_APP_ID=APP_IDS["yahoo"],
            YAHOO_RATE_PER_SECOND=RATE,
            **{f"{marketplace.upper()}_API_URL": fake.url},
            # The world's marketplace only: product polling asks every marketplace configured
            # for a JAN code's offers, and the other has no fake here.
            MARKETPLACE_ADAPTERS={marketplace: ADAPTERS[marketplace]},
        ):
            for params, edit_hours in worlds:
                name = label(params, edit_hours)
                if name in done:
                    continue  # the same world as a row before (its rows serve both tables)
                shape = dataclasses.replace(params, edit_hours=None)
                if written != shape:
                    built = time.monotonic()
                    if written is not None:
                        clear_world()
                    world = build_world(params)
                    watch_ids = write_world(world, T0)
                    crossed = dict(zip(watch_ids, crossings(world), strict=True))
                    fixed = Fixed()
                    written = shape
                    print(
                        f"world {name}: {world.watched():,} watched listings in "
                        f"{len(world.shops):,} shops ({sum(s.size for s in world.shops):,} "
                        f"items), {len(world.products):,} products, {world.watches:,} watches; "
                        f"written in {time.monotonic() - built:.0f} s",
                        flush=True,
                    )
                    for line in describe(dataclasses.replace(params, edit_hours=edit_hours)):
                        print(f"  {line}", flush=True)
                else:  # the same world, other edits: the one line that differs
                    edits = describe(dataclasses.replace(params, edit_hours=edit_hours))
                    print(f"world {name}: the world above, {edits[UPDATE_LINE]}", flush=True)
                assert world is not None and fixed is not None
                set_updates(world, edit_hours, params.seed)
                world.params = params  # a shared world takes this row's edits
                fake.use(world)
                for plan in PLANS:
                    row = run_scenario(
                        world, name, crossed, plan, judge, clock, fake, fixed, warmup, tail
                    )
                    rows.append(row)
                    done[name] = row
                    print(f"  {plan}: {row.requests:,} requests, {row.wall:.0f} s", flush=True)
            clear_world()
    finally:
        fake.stop()
        clock.stop()
        forget_limiter(f"{marketplace}:{app_id}", RATE)
    names = [label(p, e) for p, e in worlds]
    window = (warmup_hours, worlds[0][0].hours - tail_hours, worlds[0][0].hours)
    print_table(rows, names[:sizes], list(dict.fromkeys(names[sizes:])), window)
    print(f"total {time.monotonic() - started:.0f} s")
    return rows


def _minutes(seconds: float | None) -> str:
    return "missed" if seconds is None else f"{seconds / 60:.0f} min"


def _row_line(row: Row, *, world: bool) -> str:
    first = f"| {row.world} " if world else f"| {row.watched:,} "
    return (
        f"{first}| {row.plan} | {row.requests:,} | {_shapes(row)} "
        f"| {row.observed / max(1, row.requests):.1f} "
        f"| {row.within_15m:.1%} | {row.within_1h:.1%} | {row.known_15m:.1%} "
        f"| {row.crossed:,} | {row.detected / max(1, row.crossed):.1%} "
        f"| {_minutes(row.p50)} | {_minutes(row.p95)} | {row.bound:.1%} "
        f"| {row.busiest_second} |"
    )


def _shapes(row: Row) -> str:
    return " / ".join(f"{row.by_shape.get(n, 0):,}" for n in ("item", "shop", "product"))


HEADER = (
    "| plan | requests | items / shops / products | prices/request | checked ≤ 15 min | ≤ 1 h "
    "| known ≤ 15 min | crossed | detected | delay p50 | p95 | bound | max req/s |"
)


def print_table(
    rows: list[Row], sizes: list[str], rest: list[str], window: tuple[float, float, float]
) -> None:
    """The size table (`sizes`: their world labels), then the sensitivity table (`rest`),
    then the targets. `window`: hours after T0 when counting starts, when the crossings
    counted end, when the runs end."""
    start, last, end = window
    market = MARKETPLACE_NAMES[rows[0].marketplace] if rows else ""
    print(
        f"\n{market}, one application id at {RATE:g} request/s; {end:g} simulated hours: requests, "
        f"prices and coverage counted from {start:g} h on (the first hours let the plan "
        f"learn the feeds), crossings from {start:g} h to {last:g} h (later ones have less "
        f"time to be detected). 'checked': polled within the window "
        "(pollplan.watched_coverage); 'known': checked, or shown unchanged by a shop feed "
        "read since; delay: true crossing → enqueue ('missed': never detected); bound: "
        "what a plan that knew the crossings in advance detects with the new plan's requests\n"
    )
    by_world: dict[str, list[Row]] = {}
    for row in rows:
        by_world.setdefault(row.world, []).append(row)
    print("| watched " + HEADER)
    print("|---" * 14 + "|")
    for name in sizes:
        for row in by_world.get(name, []):
            print(_row_line(row, world=False))
    if rest:
        print("\nsensitivity (the new plan must never be worse than today's):\n")
        print("| world " + HEADER)
        print("|---" * 14 + "|")
        for name in rest:
            for row in by_world.get(name, []):
                print(_row_line(row, world=True))
    print(
        f"\nfake {market}: at most {max(r.busiest_second for r in rows)} request(s) of the id "
        f"in any simulated second, {sum(r.too_many for r in rows)} answered 429"
    )
    judge_targets(by_world, sizes, rest)


def judge_targets(by_world: dict[str, list[Row]], sizes: list[str], rest: list[str]) -> None:
    """Whether the targets hold: at the largest size, the new plan's detections and delays
    (or, where the oracle's bound is below a target, ≥ 80 % of the bound); in every
    sensitivity row, the new plan no worse than today's."""
    largest = {row.plan: row for row in by_world[sizes[-1]]}
    new, today = largest["new"], largest["today"]
    share = new.detected / max(1, new.crossed)
    market = MARKETPLACE_NAMES[new.marketplace]
    print(f"\n{market}, targets at {new.watched:,} watched listings, one id:")
    met = share >= TARGET_DETECTED or (
        new.bound < TARGET_DETECTED and share >= BOUND_SHARE * new.bound
    )
    print(
        f"- detected ≥ {TARGET_DETECTED:.0%}: {share:.1%} (bound {new.bound:.1%}; "
        f"{share / new.bound if new.bound else 0:.0%} of it) — {'met' if met else 'NOT met'}"
    )
    for name, share, seconds, value in (
        ("p50", 0.5, TARGET_P50, new.p50),
        ("p95", 0.95, TARGET_P95, new.p95),
    ):
        ok = value is not None and value <= seconds
        verdict = "met" if ok else "NOT met"
        told = _minutes(told_percentile(new, share))
        print(
            f"- delay {name} ≤ {seconds // 60} min: {_minutes(value)} — {verdict} "
            f"(of the crossings told: {told})"
        )
    print(
        f"- against today's plan: detected {today.detected / max(1, today.crossed):.1%}, "
        f"p50 {_minutes(today.p50)}, p95 {_minutes(today.p95)} (of the crossings told: "
        f"{_minutes(told_percentile(today, 0.5))} and {_minutes(told_percentile(today, 0.95))})"
    )
    print(
        f"- the few: listings 1-3 people watch hold {new.few_crossed:,} of the "
        f"{new.crossed:,} crossed watches ({new.few_crossed / max(1, new.crossed):.1%}); "
        f"told within the hour: {_share(new.few_within_hour, new.few_crossed)} "
        f"(today's plan {_share(today.few_within_hour, today.few_crossed)}); a p95 within "
        f"the hour needs {_needed(new):.0%} of them, and a plan that does not know where "
        f"prices cross can tell at most {new.few_ceiling:.0%} within the hour with these "
        f"requests, all of them on the few ({_reach(new)})"
    )
    for name in rest:
        pair = {row.plan: row for row in by_world.get(name, [])}
        if len(pair) < 2:
            continue
        new_row, today_row = pair["new"], pair["today"]
        worse = _worse(new_row, today_row)
        print(
            f"- {name}: new plan {'WORSE than' if worse else 'no worse than'} today's "
            f"(detected {_share(new_row.detected, new_row.crossed)} against "
            f"{_share(today_row.detected, today_row.crossed)}, p50 {_seconds(new_row.p50)} "
            f"against {_seconds(today_row.p50)}; {_sooner(new_row, today_row)})"
        )


def told_percentile(row: Row, share: float) -> float | None:
    """A percentile of the delays of the crossed watches that were told, leaving out those
    never told. The targets' delays count a crossing never told as never (`Row.p95`); this
    reading, printed beside it, is the delay of the watches that were told, to their row (the
    bench runs no dispatcher: the dispatch adds its seconds after the row)."""
    told = sorted(delay for delay in row.delays.values() if delay != math.inf)
    if not told:
        return None
    return told[min(len(told) - 1, math.floor(share * len(told)))]


def _sooner(new: Row, today: Row) -> str:
    """Watch by watch: how many crossed watches the new plan told sooner, and later."""
    sooner, later = _sooner_later(new, today)
    return f"told {sooner:,} crossed watches sooner, {later:,} later"


def _sooner_later(new: Row, today: Row) -> tuple[int, int]:
    sooner = later = 0
    for watch, delay in new.delays.items():
        other = today.delays.get(watch, math.inf)
        sooner += delay < other
        later += delay > other
    return sooner, later


def _seconds(value: float | None) -> str:
    return "missed" if value is None else f"{value:.0f} s"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _needed(row: Row) -> float:
    """The share of the few's crossings told within the hour that a p95 within the hour
    needs, when every other crossing is told within it."""
    if not row.few_crossed:
        return 0.0
    missing = max(0, math.ceil(0.95 * row.crossed) - (row.crossed - row.few_crossed))
    return missing / row.few_crossed


def _reach(row: Row) -> str:
    if _needed(row) > row.few_ceiling:
        return "out of reach without foresight"
    return "within reach"


# A later median within this is not a plan told later: the median crossing sits on one of a
# few listings thousands watch, and where its crossing falls between two of its checks moves
# the median by up to a check interval (see `_worse`).
MEDIAN_SLACK = 60.0


def _worse(new: Row, today: Row) -> bool:
    """Fewer crossings detected; more crossed watches told later than sooner, watch by
    watch; or a median delay later by MEDIAN_SLACK or more. Not a median later by seconds:
    at 100,000 listings both plans gave each popular listing the same checks (4,330 and
    4,320 in two hours), and the new plan's 16 s later median came from one listing of
    2,260 crossed watches whose product page was asked 29 s before its crossing where one
    item a request asked 23 s after — the phase of one check, while the same run told
    27,969 crossed watches sooner and those 2,260 later."""

    def share(row: Row) -> float:
        return row.detected / max(1, row.crossed)

    def p50(row: Row) -> float:
        return math.inf if row.p50 is None else row.p50

    sooner, later = _sooner_later(new, today)
    return share(new) < share(today) or later > sooner or p50(new) - p50(today) >= MEDIAN_SLACK


if __name__ == "__main__":
    main()
