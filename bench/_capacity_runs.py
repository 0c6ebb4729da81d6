"""One scenario of bench_capacity.py: polling runs every POLL_EVERY_MINUTES of simulated time,
with today's plan (POLL_SHAPES item: one item a request) or the new one (items, shops' feeds,
products' offers), through the real entry point (`watches.polling.poll.poll`: the plan, the
adapter, the limiter, the feeds' learning, the observation rule); what they detected, and how
much of the watched world they kept fresh."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from unittest import mock

from _capacity_world import PRICE_MOVES_PER_HOUR, World, crossing_events, reset_world

T0 = dt.datetime(2026, 12, 1, 0, 0, tzinfo=dt.UTC)  # 09:00 in Tokyo
APP_ID = "capacity-app-1"
# One application id per marketplace, each at its allowance: 1 request/s (Rakuten Ichiba),
# 1 query/s (Yahoo! Shopping).
APP_IDS = {"rakuten": APP_ID, "yahoo": "capacity-yahoo-1"}
RATE = 1.0
# The plans compared: today's (one item a request) and the new one (every shape).
PLANS = {"today": ["item"], "new": ["item", "shop", "product"]}


@dataclass
class Row:
    world: str
    plan: str
    watched: int
    requests: int  # over the measured hours
    by_shape: dict[str, int]
    observed: int  # prices observed (answers about a listing we know) over the measured hours
    within_15m: float
    within_1h: float
    known_15m: float  # checked, or shown unchanged by a complete shop feed, within 15 min
    crossed: int
    detected: int
    p50: float | None  # seconds; None: the percentile falls on a crossing never detected
    p95: float | None
    bound: float  # share of the crossings an oracle with the same requests detects
    too_many: int  # requests the fake Ichiba answered 429 (over 1/s for the id)
    busiest_second: int  # most requests the id made in one simulated second
    wall: float
    # The n-th watch of the world → seconds after T0 its row was enqueued (by place, not
    # by id: two worlds written into one PostgreSQL database get other ids).
    detections: dict[int, float]
    # The crossed watches of listings only one to three people watch (not the popular
    # ones), and how many of them were told within the hour: the tail the p95 is.
    few_crossed: int = 0
    few_within_hour: int = 0
    # The n-th watch of the world → its delay (inf: never told), for the crossings counted:
    # two plans compared watch by watch, which a few large crowds cannot swing as they can
    # a median.
    delays: dict[int, float] = field(default_factory=dict)
    # The most of the few's crossings a plan without foresight could tell within the hour
    # with as many requests (`few_ceiling`).
    few_ceiling: float = 1.0
    marketplace: str = "rakuten"


class Fixed:
    """What does not change while a world's scenarios run, read once: each listing's
    watches by target, highest first (a price at or below a target fires that watch and
    every one before it)."""

    def __init__(self) -> None:
        from watches.models import Watch

        self.targets: dict[int, list[tuple[int, int]]] = defaultdict(list)
        rows = Watch.objects.values_list("listing_id", "target_price", "id").iterator(10_000)
        for listing_id, target, watch_id in rows:
            assert target is not None  # every watch of this world has a target price
            self.targets[listing_id].append((target, watch_id))
        for targets in self.targets.values():
            targets.sort(reverse=True)


def run_scenario(
    world: World,
    label: str,
    crossed: dict[int, float | None],
    plan: str,
    judge: str,
    clock,
    fake,
    fixed: Fixed,
    warmup: float,
    tail: float,
) -> Row:
    from django.conf import settings
    from django.test import override_settings
    from django.utils import timezone

    from watches.marketplaces.ratelimit import RateLimiter, install_limiter
    from watches.polling.poll import poll

    started = time.monotonic()
    reset_world(T0)
    clock.move_to(T0.timestamp())
    marketplace = world.params.marketplace
    install_limiter(
        f"{marketplace}:{APP_IDS[marketplace]}",
        RATE,
        RateLimiter(RATE, clock=clock, sleep=clock.sleep),
    )
    fake.by_second.clear()
    fake.shapes.clear()
    too_many_before = fake.too_many
    judging = _Judging(fixed.targets) if judge == "sim" else None
    interval = settings.POLL_EVERY_MINUTES * 60
    samples: list[dict[str, float]] = []
    observed = 0
    measured_from = T0.timestamp() + warmup
    with override_settings(POLL_SHAPES=PLANS[plan]), _judged_by(judging):
        for run in range(int(world.horizon // interval)):
            start = T0.timestamp() + run * interval
            clock.move_to(max(clock.now, start))
            if run * interval >= max(warmup, 3600) and run * interval % 1800 == 0:
                samples.append(_coverage(timezone.now()))
            result = poll(max_seconds=settings.POLL_MAX_SECONDS)
            if start >= measured_from:
                observed += result.observations
    clock.move_to(max(clock.now, T0.timestamp() + world.horizon))
    detected = judging.detected if judging else _enqueued()
    requests = sum(n for (_, second), n in fake.by_second.items() if second >= measured_from)
    by_shape: dict[str, int] = defaultdict(int)
    for (shape, second), n in fake.shapes.items():
        if second >= measured_from:
            by_shape[shape] += n
    return _row(
        world,
        label,
        plan,
        crossed,
        detected,
        samples,
        requests,
        dict(by_shape),
        observed,
        fake,
        too_many_before,
        (warmup, world.horizon - tail),
        time.monotonic() - started,
    )


@contextlib.contextmanager
def _judged_by(judging: _Judging | None):
    """With `judging`: polling's judging of listing watches replaced by it (in the item and
    shop path and in the product path), everything else real."""
    if judging is None:
        yield
        return
    with (
        mock.patch("watches.polling.poll.judge_listings", judging),
        mock.patch("watches.products.polling.judge_listings", judging),
    ):
        yield


class _Judging:
    """Polling's judging of target-price watches, without loading them: for a watch with
    nothing delivered yet, `detect` fires exactly when an in-stock observation is at or
    below the target, so the first such observation is its detection (at the moment its
    batch is enqueued, `enqueue_many`'s `created_at`). Counts the answers as
    `poll.judge_listings` does; returns nothing to enqueue."""

    def __init__(self, targets: dict[int, list[tuple[int, int]]]) -> None:
        self.detected: dict[int, float] = {}
        self.watches = targets
        self.fired: dict[int, int] = defaultdict(int)

    def __call__(self, observations, result):
        from django.utils import timezone

        enqueued_at = timezone.now().timestamp() - T0.timestamp()
        for seen in observations.seen:
            seen_now = seen.observation
            if seen_now is None:
                result.errors += 1
                continue
            result.observations += 1
            if not seen_now.in_stock or seen_now.effective_price is None:
                continue
            targets = self.watches.get(seen.listing.pk, [])
            k = self.fired[seen.listing.pk]
            while k < len(targets) and targets[k][0] >= seen_now.effective_price:
                self.detected[targets[k][1]] = enqueued_at
                k += 1
            self.fired[seen.listing.pk] = k
        return [], []


def _coverage(now: dt.datetime) -> dict[str, float]:
    """The overview's coverage (`watched_coverage`: polled within 15 min / 1 h), and the
    share known within 15 min counting what complete shop feeds showed unchanged
    (`feeds.seen_through_feeds`, what the plan reads)."""
    from watches.marketplaces.base import get_marketplace
    from watches.models import Listing, ShopFeed
    from watches.polling.feeds import seen_through_feeds
    from watches.polling.plan import watched_coverage

    coverage = watched_coverage(now)
    values = Listing.objects.values("id", "source", "item_code", "last_polled_at", "last_error")
    rows: list[dict] = [dict(row) for row in values]
    shop_feeds = {(f.source, f.shop): f for f in ShopFeed.objects.all()}
    adapters: dict = {}

    def shop_of(source: str, code: str) -> str | None:
        if source not in adapters:
            adapters[source] = get_marketplace(source)
        return adapters[source].shop_of(code)

    seen = seen_through_feeds(rows, shop_feeds, shop_of)
    cutoff = now - dt.timedelta(minutes=15)
    known = 0
    for row in rows:
        times = [t for t in (row["last_polled_at"], seen.get(row["id"])) if t is not None]
        known += bool(times) and max(times) >= cutoff
    return {
        "within_15m": float(coverage["within_15m"]),
        "within_1h": float(coverage["within_1h"]),
        "known_15m": known / len(rows) if rows else 1.0,
    }


def _enqueued() -> dict[int, float]:
    from django.db.models import Min

    from outbox.models import Outbox

    rows = Outbox.objects.values("watch_id").annotate(at=Min("created_at")).order_by()
    return {row["watch_id"]: (row["at"] - T0).total_seconds() for row in rows}


def _row(
    world: World,
    label: str,
    plan: str,
    crossed: dict[int, float | None],
    detected: dict[int, float],
    samples: list[dict[str, float]],
    requests: int,
    by_shape: dict[str, int],
    observed: int,
    fake,
    too_many_before: int,
    window: tuple[float, float],
    wall: float,
) -> Row:
    counted = {
        watch: (detected[watch] - at) if watch in detected else math.inf
        for watch, at in crossed.items()
        if at is not None and window[0] <= at < window[1]
    }
    delays = sorted(counted.values())
    few = _of_few(world, list(crossed))
    few_delays = [delay for watch, delay in counted.items() if watch in few]

    def percentile(share: float) -> float | None:
        if not delays:
            return None
        value = delays[min(len(delays) - 1, math.floor(share * len(delays)))]
        return None if value == math.inf else value

    mean = statistics.fmean
    place = {watch: n for n, watch in enumerate(crossed)}  # crossed is in world order
    return Row(
        world=label,
        plan=plan,
        watched=world.watched(),
        requests=requests,
        by_shape=by_shape,
        observed=observed,
        within_15m=mean(s["within_15m"] for s in samples) if samples else 0.0,
        within_1h=mean(s["within_1h"] for s in samples) if samples else 0.0,
        known_15m=mean(s["known_15m"] for s in samples) if samples else 0.0,
        crossed=len(delays),
        detected=sum(1 for delay in delays if delay != math.inf),
        p50=percentile(0.50),
        p95=percentile(0.95),
        bound=oracle_bound(world, window, requests),
        too_many=fake.too_many - too_many_before,
        busiest_second=max(fake.by_second.values(), default=0),
        wall=wall,
        detections={place[watch]: at for watch, at in detected.items()},
        few_crossed=len(few_delays),
        few_within_hour=sum(1 for delay in few_delays if delay <= 3600),
        delays={place[watch]: delay for watch, delay in counted.items()},
        few_ceiling=few_ceiling(world, requests / ((world.horizon - window[0]) / 3600)),
        marketplace=world.params.marketplace,
    )


def _of_few(world: World, watches: list[int]) -> set[int]:
    """The watches (ids, given in world order) of listings that are not popular."""
    out: set[int] = set()
    place = 0
    for item in world.items:
        if not item.popular:
            out.update(watches[place : place + len(item.targets)])
        place += len(item.targets)
    return out


def oracle_bound(world: World, window: tuple[float, float], requests: int) -> float:
    """The share of the crossed watches a plan that knew in advance when each listing's price
    crosses would detect with `requests` requests of one item each: one request at each
    crossing moment within `window` (seconds after T0), the moments that cross most watches
    first."""
    sizes = sorted(crossing_events(world, *window), reverse=True)
    total = sum(sizes)
    return sum(sizes[:requests]) / total if total else 1.0


# A page of a shop's items: Rakuten's by update time, 30 of its latest changes; Yahoo's by
# review count (it documents no sort by update time), 50 items' prices now.
PAGE_SIZES = {"rakuten": 30, "yahoo": 50}


def few_ceiling(world: World, requests_per_hour: float) -> float:
    """The largest share of the few's crossings (listings not popular) a plan that does not
    know in advance where prices cross could tell within the hour, even with every one of
    `requests_per_hour` on them. A crossing is told within the hour only by a request in that
    hour that shows it, and a request shows at most an hour of so many listings' changes:
    - a product's page, its offers' prices now: the last hour of each offer;
    - on Rakuten, a page of a shop's latest changes, 30 of them: about 30 / (catalogue × an
      item's updates an hour) hours of each watched listing, the same for every shop (its
      catalogue grows with its watched listings); on Yahoo! Shopping, a page of a store's
      items in an order unrelated to change, 50 of them: the prices now of 50 / catalogue
      watched listings;
    - an item, one listing's.
    The widest requests are counted first, and what they show is not taken from what the
    others show (a product's offers are in shops too), so the share is an upper bound; it
    leaves the popular listings unasked, which no plan can afford."""
    params = world.params
    edits = 0.0 if params.edit_hours is None else 1 / params.edit_hours
    per_page = PAGE_SIZES[params.marketplace]
    if params.marketplace == "rakuten":
        per_shop_page = per_page / (params.catalogue * (PRICE_MOVES_PER_HOUR + edits))
    else:
        per_shop_page = per_page / params.catalogue
    few = sum(1 for item in world.items if not item.popular)
    few_offers = (
        sum(1 for n in offers if not world.items[n].popular) for offers in world.products.values()
    )
    products = sorted(few_offers, reverse=True)
    left, shown = requests_per_hour, 0.0
    for offers in products:
        if offers <= per_shop_page or left < 1:
            break
        shown += offers
        left -= 1
    shown += left * per_shop_page
    return min(1.0, shown / few) if few else 1.0


__all__ = ["APP_ID", "APP_IDS", "PLANS", "RATE", "T0", "Fixed", "Row", "run_scenario"]
