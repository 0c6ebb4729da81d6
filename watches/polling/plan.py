"""The poll plan: which due listings a polling run asks about, in what order, within the
requests the marketplace's budget allows.

A rate-limited marketplace (its adapter has a `budget`, `watches.marketplaces.ratelimit`)
gives a run `rate × min(POLL_MAX_SECONDS, 60 × POLL_EVERY_MINUTES) × (1 − POLL_REFETCH_SHARE)`
requests: what the fleet's rate allows in the time a run may take before the next one
starts, minus the share kept for the dispatcher's re-fetches of the same ids. With the
defaults (a run every 2 minutes of at most 120 s) polling spends 80 % of each id's
allowance: 96 requests a run at 1/s. A marketplace without a budget (the demo) gives every
due listing.

A fraction of a request is carried from run to run by the clock, without stored state
(`per_run`): run number k since the epoch (one every POLL_EVERY_MINUTES) gets
floor((k + 1) × q) − floor(k × q) of q requests a run, so consecutive runs add up to q
each — at the lowest rate the settings accept, 0.01/s, 0.96 a run is one request in 24
runs of 25, where rounding down every run asked nothing, ever. A whole q is unchanged.

The requests go by priority:
0. a quarter of the run's requests (OLDEST_SHARE, its fraction carried from run to run as
   above: a budget of 3 gives it one request in three runs of four, a budget of 1 one in
   four) to the watched listings checked longest ago, whatever their score: without it a
   listing far from every line waits for ever whenever the listings near one fill the
   budget (bench/bench_capacity.py measured a quarter of the watched listings never
   checked in 3 hours at 4 ids, while oldest-first checked them all), and the overview's
   "checked within 1 h" falls with it.
   "Checked" counts a complete shop feed's read that showed the listing unchanged, and the
   oldest asks with the request that answers most due listings for certain — its
   product's offers, its shop's complete feed, or itself alone;
1. listings with live watches, highest score first, where the score is
   `(4 × closeness × √watches + popularity + volatility) × staleness`:
   - closeness, 0–1: how near the listing's price is to making one of its watches fire —
     1 at or past the line, ½ at 5 % away (a target price, the line of a price drop, the
     90-day low; back-in-stock watches are close while the listing is out of stock) —
     weighed by the square root of its live watches: a crossing near a crowd's line tells
     many people, and a product's or a shop's request, which sums its listings' worth,
     must not outbid it with a few lone watches each (bench/bench_capacity.py measured a
     listing of 1,200 watches 0.5 % from their line left unasked for an hour);
   - popularity, 0–1: log10(1 + live watches) / 3 (1,000 watches is 1);
   - volatility, 0–1: how far the 90-day low dips below the typical price, 20 % being 1;
   - staleness: polling intervals since the last poll, at most 4 (never polled: 4), so a
     listing far from any line still comes up when it has waited long enough;
   closeness weighs four times the rest: a listing a watcher is about to be told about
   goes before a popular one whose price is nowhere near. A request that answers several
   listings (a product's offers, a shop's feed) is worth the square root of the sum of
   their squared scores (`_Candidate.value`);
2. unwatched listings with what is left, least recently polled first.
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.conf import settings
from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone

from watches.marketplaces import halts
from watches.marketplaces.base import Shape, get_marketplace
from watches.marketplaces.ratelimit import LimiterUnavailable, app_id_label
from watches.models import (
    Listing,
    ShopFeed,
    Trigger,
    Watch,
    effective_price,
    unit_price,
)
from watches.polling import feeds
from watches.triggers import DEFAULT_DROP_PERCENT

log = logging.getLogger("watches.polling.plan")

CLOSE_AT = 0.05  # relative distance to the line at which closeness is ½
VOLATILE_AT = 0.20  # dip of the 90-day low below typical at which volatility is 1
CLOSENESS_WEIGHT = 4.0
MAX_STALENESS = 4.0
OLDEST_SHARE = 0.25  # of a run's requests, to the watched listings checked longest ago


@dataclass(frozen=True)
class Planned:
    """One request of a run: one listing (`ITEM`), a shop's feed (`SHOP`, `key` the shop) or
    every shop's offer of a product (`PRODUCT`, `key` the JAN code), with the due listings it
    is expected to answer (`covers`) and the value it was chosen for."""

    listing_id: int | None
    source: str
    watched: bool
    score: float
    shape: Shape = Shape.ITEM
    key: str = ""
    product_id: int | None = None
    covers: tuple[int, ...] = ()
    # Chosen for the quarter that goes to the watched listings known longest ago: asked even
    # when the run is cut short (`watches.polling.poll`), where it would come last again.
    oldest: bool = False


@dataclass
class WatchGroup:
    """Live watches of one listing with one trigger: the one nearest its line decides."""

    trigger: str
    use_unit_price: bool
    count: int
    highest_target: int | None
    smallest_drop: int | None


@dataclass(frozen=True)
class Reach:
    """What one marketplace can be asked in a run: its requests (None: no budget), the
    shapes the plan may use there, and how to read its shops and pages."""

    budget: int | None
    shapes: frozenset[Shape]
    per_page: int = 0
    shop_of: Callable[[str], str | None] | None = None


def run_budget(source: str, now: dt.datetime | None = None) -> int | None:
    """Requests a polling run at `now` may spend on `source`; None when its adapter has no
    budget. An unreachable shared budget gives nothing: the run then polls nothing of
    `source`. An adapter that cannot even be built has no budget: fetching then records its
    error on each listing, as it always did."""
    return reach_of(source, now or timezone.now()).budget


def per_run(amount: float, now: dt.datetime) -> int:
    """The requests the run at `now` gets of `amount` a run (a fraction allowed):
    floor((k + 1) × amount) − floor(k × amount), k the run's number on the clock (runs since
    the epoch, POLL_EVERY_MINUTES apart). Consecutive runs add up to `amount` each, each
    gets `amount` rounded down or up: 0.25 is one request every fourth run."""
    run = int(now.timestamp() // (60 * settings.POLL_EVERY_MINUTES))
    # In whole millionths: integer arithmetic keeps a whole amount whole at any k (a float
    # product a hair below an integer would give one run a request less, the next one more).
    millionths = round(amount * 1_000_000)
    return (run + 1) * millionths // 1_000_000 - run * millionths // 1_000_000


def reach_of(source: str, now: dt.datetime) -> Reach:
    """`Reach` of `source`'s adapter for the run at `now`: its run budget (see `run_budget`
    and `per_run`) and, within POLL_SHAPES, the shapes it answers — shop feeds only where the
    marketplace sorts a shop's items by their last update and the feeds are `trusted`,
    products only where it answers every shop's offer of a JAN code."""
    try:
        adapter = get_marketplace(source)
    except Exception:  # misconfigured: polling tells staff per listing (polling.observations)
        log.warning("no budget for %s: its adapter cannot be built", source, exc_info=True)
        return Reach(None, frozenset({Shape.ITEM}))
    wanted = {Shape(name) for name in settings.POLL_SHAPES}
    shapes = {Shape.ITEM}
    answers: frozenset[Shape] = getattr(adapter, "shapes", frozenset())
    if (
        Shape.SHOP in wanted
        and Shape.SHOP in answers
        and getattr(adapter, "shop_by_update", False)
        and feeds.trusted(source)
    ):
        shapes.add(Shape.SHOP)
    if Shape.PRODUCT in wanted and callable(getattr(adapter, "offers", None)):
        shapes.add(Shape.PRODUCT)
    reach = Reach(
        None,
        frozenset(shapes),
        getattr(adapter, "per_page", 0),
        getattr(adapter, "shop_of", None),
    )
    budget = getattr(adapter, "budget", None)
    if budget is None:
        return reach
    try:
        rate = budget.current_rate()
    except LimiterUnavailable:
        return replace(reach, budget=0)
    share = 1 - settings.POLL_REFETCH_SHARE
    # A run may take POLL_MAX_SECONDS, but the next one starts after POLL_EVERY_MINUTES:
    # planning more than that interval's requests would only make runs overlap.
    seconds = min(settings.POLL_MAX_SECONDS, settings.POLL_EVERY_MINUTES * 60)
    return replace(reach, budget=max(0, per_run(rate * seconds * share, now)))


_ROW_FIELDS = (
    "id",
    "source",
    "item_code",
    "product_id",
    "jan",
    "price",
    "shipping",
    "in_stock",
    "units_per_pack",
    "typical_price",
    "low_90",
    "last_polled_at",
    "last_error",
    "beyond_product_page",
)


def plan(
    listings: QuerySet[Listing],
    now: dt.datetime,
    *,
    budgets: dict[str, int | None] | None = None,
    groups: dict[int, list[WatchGroup]] | None = None,
    reaches: dict[str, Reach] | None = None,
) -> list[Planned]:
    """The requests of a run over `listings` (given least recently polled first, as
    `due_listings` does; that order also breaks ties), per source as many as its budget
    allows (`budgets` given, or asked of each adapter). See the module's docstring for the
    order. `groups`: the listings' live watches grouped (`watch_groups`), when the caller
    has them (the capacity bench, whose watches do not change while it runs); `reaches`:
    what each source can be asked, when the caller knows (tests, the bench)."""
    rows = list(listings.values(*_ROW_FIELDS))
    if groups is None:
        groups = watch_groups(listings)
    sources = list(dict.fromkeys(row["source"] for row in rows))
    reaches = dict(reaches or {})
    for source in sources:
        if source not in reaches:
            reaches[source] = reach_of(source, now)
        if budgets is not None and source in budgets:
            reaches[source] = replace(reaches[source], budget=budgets[source])
    # A marketplace halted for a configuration fault gets its probe, or nothing.
    cut = halts.within_halts({source: reaches[source].budget for source in sources}, now)
    for source in sources:
        reaches[source] = replace(reaches[source], budget=cut[source])
    interval = dt.timedelta(minutes=settings.POLL_MINUTES)
    shop_feeds = _feeds(rows, reaches)
    seen = feeds.seen_through_feeds(
        [row for row in rows if Shape.SHOP in reaches[row["source"]].shapes],
        shop_feeds,
        lambda source, code: _shop(reaches[source], code),
    )
    by_source: dict[str, list[_Candidate]] = defaultdict(list)
    base: dict[int, float] = {}
    rows_at = {row["id"]: row["last_polled_at"] for row in rows}
    for row in rows:
        mine = groups.get(row["id"])
        base[row["id"]] = _base(row, mine) if mine else 0.0
        at = seen.get(row["id"], row["last_polled_at"])
        score = base[row["id"]] * _staleness(at, now, interval)
        request = Planned(row["id"], row["source"], bool(mine), score, covers=(row["id"],))
        by_source[row["source"]].append(_Candidate(request, {row["id"]: score}))
    chosen: list[Planned] = []
    for source, items in by_source.items():
        reach = reaches[source]
        # Oldest first by what is known of each listing: a complete feed's read counts as
        # a check of the listings it showed unchanged (a stable sort keeps the ties' order).
        items.sort(key=lambda c: _known_at(seen, c.request, rows_at))
        shaped = _shaped(source, reach, rows, base, shop_feeds, now, interval)
        oldest = 0 if reach.budget is None else per_run(OLDEST_SHARE * reach.budget, now)
        chosen.extend(_choose(items, shaped, reach.budget, oldest))
    return chosen


_NEVER = dt.datetime.min.replace(tzinfo=dt.UTC)


def _known_at(
    seen: dict[int, dt.datetime], request: Planned, polled: dict[int, dt.datetime | None]
) -> dt.datetime:
    pk = request.listing_id
    assert pk is not None  # an item's request
    return seen.get(pk) or polled[pk] or _NEVER


@dataclass
class _Candidate:
    """A request the plan may choose: what each listing it may answer is worth (`parts`),
    and the share of them it is expected to answer (`reach`: 1 but for a shop's feed)."""

    request: Planned
    parts: dict[int, float]
    reach: float = 1.0

    def value(self, answered: dict[int, float]) -> float:
        """Worth now, on the scale of one listing's score: the root of the sum of its
        listings' squared scores, each less what the requests already chosen are expected
        to answer of it. A score follows the square-root rule (about √watches × time
        unasked: checks spaced by 1/√watches keep the watches' summed wait least), so its
        square is what a check clears, and that adds up across listings — a product of
        three offers, each as worth asking as a lone listing, is worth √3 of one, not 3.
        A sum of scores let products of lone watches outbid the crowds near their lines
        (bench/bench_capacity.py: at 100,000 listings the median crossing was told two
        minutes later than with one item a request)."""
        return math.sqrt(
            self.reach
            * sum(part * part * (1.0 - answered.get(pk, 0.0)) for pk, part in self.parts.items())
        )

    def unanswered(self, answered: dict[int, float]) -> int:
        """How many of its listings no request chosen so far answers for certain."""
        return sum(1 for pk in self.parts if answered.get(pk, 0.0) < 1)

    def choose(self, answered: dict[int, float]) -> None:
        for pk in self.parts:
            answered[pk] = 1.0 - (1.0 - answered.get(pk, 0.0)) * (1.0 - self.reach)


def _choose(
    items: list[_Candidate], shaped: list[_Candidate], budget: int | None, oldest: int
) -> list[Planned]:
    """Within `budget` requests: `oldest` of them (this run's OLDEST_SHARE) to the watched
    listings checked longest ago (in the order given), then the requests worth most now — a
    product's or a shop's worth the listings it answers less what the requests chosen before
    it answer of them (lazy: a value is recomputed when it comes up, and only ever falls) —
    then unwatched listings, in the order given."""
    if budget is None:
        # No budget (the demo): every due listing, watched first by score.
        ranked = sorted(items, key=lambda c: (not c.request.watched, -c.request.score))
        return [c.request for c in ranked]
    answered: dict[int, float] = {}
    chosen: list[Planned] = []
    quota = min(oldest, budget)
    # A product's offers, or a complete shop page's listings, are answered for certain by
    # one request: the oldest listing asks with the one that answers most of what is due.
    certain: dict[int, list[_Candidate]] = defaultdict(list)
    for candidate in shaped:
        if candidate.reach >= 1:
            for pk in candidate.parts:
                certain[pk].append(candidate)
    for candidate in items:
        if len(chosen) >= quota:
            break
        listing_id = candidate.request.listing_id
        if (
            not candidate.request.watched
            or listing_id is None
            or answered.get(listing_id, 0.0) >= 1
        ):
            continue
        best = max(
            [candidate, *certain.get(listing_id, ())],
            key=lambda c: (c.unanswered(answered), c.value(answered)),
        )
        chosen.append(replace(best.request, score=best.value(answered), oldest=True))
        best.choose(answered)
    heap = [
        (-c.value(answered), order, c)
        for order, c in enumerate([*shaped, *(c for c in items if c.request.watched)])
    ]
    heapq.heapify(heap)
    while heap and len(chosen) < budget:
        _, order, candidate = heapq.heappop(heap)
        value = candidate.value(answered)
        if value <= 0:
            continue
        if heap and value < -heap[0][0]:
            heapq.heappush(heap, (-value, order, candidate))  # worth less now: back in line
            continue
        chosen.append(replace(candidate.request, score=value))
        candidate.choose(answered)
    # Asked in order of worth, the quarter's among the rest: a crowd's crossing waits for no
    # request worth less (a batch is judged when its last answer is in).
    chosen.sort(key=lambda request: -request.score)
    for candidate in items:
        if len(chosen) >= budget:
            break
        if not candidate.request.watched and candidate.request.listing_id not in answered:
            chosen.append(candidate.request)
            candidate.choose(answered)
    return chosen


def _shaped(
    source: str,
    reach: Reach,
    rows: list[dict],
    base: dict[int, float],
    shop_feeds: dict[tuple[str, str], ShopFeed],
    now: dt.datetime,
    interval: dt.timedelta,
) -> list[_Candidate]:
    """The product and shop-feed requests worth considering on `source`: each product with
    two or more due offers there (one request answers them all, in stock or not), each shop
    with two or more due watched listings (page 1 of its feed shows what changed since its
    last read, as far as a page reaches)."""
    mine = [row for row in rows if row["source"] == source]
    candidates: list[_Candidate] = []
    if Shape.PRODUCT in reach.shapes:
        offers: dict[int, list[dict]] = defaultdict(list)
        for row in mine:
            # An offer its product's page did not reach last time is asked for alone.
            if row["product_id"] is not None and not row["beyond_product_page"]:
                offers[row["product_id"]].append(row)
        for product_id, mine_offers in offers.items():
            if len(mine_offers) < 2:
                continue
            jan = mine_offers[0]["jan"]  # an offer's JAN code is its product's
            parts = {
                row["id"]: _score_at(row, base, row["last_polled_at"], now, interval)
                for row in mine_offers
            }
            request = Planned(
                None, source, True, sum(parts.values()), Shape.PRODUCT, jan, product_id,
                tuple(parts),
            )  # fmt: skip
            candidates.append(_Candidate(request, parts))
    if Shape.SHOP in reach.shapes and reach.shop_of is not None:
        by_shop: dict[str, list[dict]] = defaultdict(list)
        for row in mine:
            shop = reach.shop_of(row["item_code"])
            if shop and base[row["id"]] > 0:
                by_shop[shop].append(row)
        for shop, watched in by_shop.items():
            if len(watched) < 2:
                continue
            feed = shop_feeds.get((source, shop))
            share = _page_reach(feed, reach.per_page, now)
            if share >= 1:
                # Expected to show every change since the last read: what it does not show
                # held its price, and needs no request of its own this run — but only where
                # the listing was observed since the chain of complete reads began (a change
                # before that would not be on the page: such a listing needs its own request
                # once, and is then answered by the feed for as long as the chain holds).
                watched = [row for row in watched if _inside_chain(row, feed)]
                if not watched:
                    continue
            else:
                # It answers only the watched listings among the page's items.
                share = _watched_on_page(feed, watched, reach.per_page, share)
            parts = {
                row["id"]: _score_at(row, base, _since_feed(row, feed), now, interval)
                for row in watched
            }
            covers = tuple(parts) if share >= 1 else ()
            request = Planned(
                None, source, True, share * sum(parts.values()), Shape.SHOP, shop, None, covers
            )
            candidates.append(_Candidate(request, parts, share))
    return candidates


def _inside_chain(row: dict, feed: ShopFeed | None) -> bool:
    """Whether a read that reaches back to the feed's last one answers this listing: it was
    observed after the chain of complete reads began."""
    observed = feeds.last_observed(row["last_polled_at"], row["last_error"])
    return (
        feed is not None
        and feed.complete_since is not None
        and observed is not None
        and observed >= feed.complete_since
    )


def _watched_on_page(
    feed: ShopFeed | None, watched: list[dict], per_page: int, share: float
) -> float:
    """The share of a shop's due watched listings a page that does not reach back to its last
    read is expected to show: a page of the shop's latest changes holds its watched listings
    as often as its last page did (never read: as often as they could fill one), so a shop
    whose catalogue is mostly unwatched answers a few of them, not `share` of them all.
    bench/bench_capacity.py measured the plan without this reading the feeds of the largest
    shops (11,000 watched listings in 220,000 items) run after run for 1.5 of them a page."""
    if feed is None or not feed.top:
        return min(share, UNKNOWN_REACH * min(1.0, per_page / len(watched)))
    codes = {row["item_code"] for row in watched}
    known = sum(1 for code in feed.top if code in codes)
    # Smoothed: a page with none of them does not prove the next will have none.
    expected = per_page * (known + 0.5) / (len(feed.top) + 1)
    return min(share, expected / len(watched))


# The share of a shop's changes page 1 is expected to show when its pace is not yet known.
UNKNOWN_REACH = 0.5


def _page_reach(feed: ShopFeed | None, per_page: int, now: dt.datetime) -> float:
    """The share of the changes since the shop's last read that its page 1 shows now."""
    if feed is None or feed.read_at is None or feed.updates_per_hour is None:
        return UNKNOWN_REACH
    hours = max(0.0, (now - feed.read_at).total_seconds() / 3600)
    expected = feed.updates_per_hour * hours
    return 1.0 if expected <= per_page else per_page / expected


def _since_feed(row: dict, feed: ShopFeed | None) -> dt.datetime | None:
    """Since when a change of this listing would be news on its shop's feed: its last
    observation, or the feed's last read when that read showed every change before it."""
    observed = row["last_polled_at"]
    vouched = feeds.last_observed(observed, row["last_error"])
    return feed.read_at if feed is not None and feed.shows_unchanged(vouched) else observed


def _score_at(
    row: dict, base: dict[int, float], at: dt.datetime | None, now: dt.datetime,
    interval: dt.timedelta,
) -> float:  # fmt: skip
    return base[row["id"]] * _staleness(at, now, interval)


def _feeds(rows: list[dict], reaches: dict[str, Reach]) -> dict[tuple[str, str], ShopFeed]:
    """The shop feeds of the sources the plan may read feeds of, in one query."""
    sources = [source for source, reach in reaches.items() if Shape.SHOP in reach.shapes]
    if not sources:
        return {}
    return {(f.source, f.shop): f for f in ShopFeed.objects.filter(source__in=sources)}


def _shop(reach: Reach, item_code: str) -> str | None:
    return reach.shop_of(item_code) if reach.shop_of is not None else None


# The share of a marketplace's requests the dispatcher's re-checks can count on: polling takes
# its slots from the same limiter, which serves waiting callers in turn.
RECHECK_SHARE = 0.5


def recheck_capacity(within: dt.timedelta) -> int | None:
    """How many re-checks — a listing's, or a product's offers — a dispatcher's batch can have
    answered within `within`: at most one request each (a shop's page answers several; a
    fresh observation none), at RECHECK_SHARE of the slowest rate-limited marketplace's rate
    now. None when no marketplace has a budget (the demo answers a whole batch at once)."""
    rates = []
    for source in settings.MARKETPLACE_ADAPTERS:
        try:
            budget = getattr(get_marketplace(source), "budget", None)
            if budget is not None:
                rates.append(budget.current_rate())
        except LimiterUnavailable:
            continue  # its rows wait without asking (`budget_unavailable`)
        except Exception:  # misconfigured: the re-check's answers say so, row by row
            log.warning("no budget for %s: its adapter cannot be built", source, exc_info=True)
    if not rates:
        return None
    return max(1, math.floor(min(rates) * within.total_seconds() * RECHECK_SHARE))


def watch_groups(listings: QuerySet[Listing]) -> dict[int, list[WatchGroup]]:
    """Live watches of these listings, grouped by (listing, trigger, unit price), in one
    query."""
    groups: dict[int, list[WatchGroup]] = defaultdict(list)
    rows = (
        Watch.live.filter(listing_id__in=listings.order_by().values("id"), paused=False)
        .values("listing_id", "trigger", "use_unit_price")
        .annotate(n=Count("id"), target=Max("target_price"), drop=Min("drop_percent"))
        .order_by()
    )
    for row in rows:
        groups[row["listing_id"]].append(
            WatchGroup(row["trigger"], row["use_unit_price"], row["n"], row["target"], row["drop"])
        )
    return groups


def _base(row: dict, groups: list[WatchGroup]) -> float:
    """What checking one watched listing is worth before time counts:
    `4 × closeness × √watches + popularity + volatility` (see the module's docstring). A run values
    every due listing — 95,000 at each run in bench_capacity — so this stays in floats."""
    closeness = max([_closeness(row, group) for group in groups])
    watches = sum(group.count for group in groups)
    popularity = min(1.0, math.log10(1 + watches) / 3)
    volatility = 0.0
    typical, low = row["typical_price"], row["low_90"]
    if typical and low is not None:
        volatility = min(1.0, max(0.0, (typical - low) / typical) / VOLATILE_AT)
    return CLOSENESS_WEIGHT * closeness * math.sqrt(watches) + popularity + volatility


def _staleness(at: dt.datetime | None, now: dt.datetime, interval: dt.timedelta) -> float:
    """Polling intervals since `at` (the last check), at most MAX_STALENESS (never: that)."""
    if at is None:
        return MAX_STALENESS
    return min(MAX_STALENESS, max(0.0, (now - at) / interval))


def _closeness(row: dict, group: WatchGroup) -> float:
    if group.trigger == Trigger.BACK_IN_STOCK:
        return 1.0 if row["in_stock"] is False else 0.0
    current = effective_price(row["price"], row["shipping"])
    if current is None:
        return 0.0
    # Floats, not Decimals: a heuristic's distance needs no exact yen, and Decimal arithmetic
    # was most of the plan's time.
    line: float | None = None
    value = float(current)
    if group.trigger == Trigger.TARGET_PRICE and group.highest_target is not None:
        line = group.highest_target
        if group.use_unit_price and row["units_per_pack"]:
            value = float(unit_price(current, row["units_per_pack"]) or current)
    elif group.trigger == Trigger.PRICE_DROP and row["typical_price"]:
        percent = group.smallest_drop or DEFAULT_DROP_PERCENT
        line = float(row["typical_price"]) * (100 - percent) / 100
    elif group.trigger == Trigger.LOWEST and row["low_90"]:
        line = row["low_90"]
    if not line:
        return 0.0
    distance = max(0.0, (value - line) / line)
    return 1.0 / (1.0 + distance / CLOSE_AT)


def watched_coverage(now: dt.datetime) -> dict[str, float | int]:
    """Of the active listings with live watches: how many, and the share checked (polled or
    re-fetched) within 15 minutes and within an hour."""
    watched = Listing.objects.filter(
        paused=False,
        id__in=Watch.live.filter(paused=False).values("listing_id"),
    )
    counts = watched.aggregate(
        watched=Count("id"),
        within_15m=Count("id", filter=Q(last_polled_at__gte=now - dt.timedelta(minutes=15))),
        within_1h=Count("id", filter=Q(last_polled_at__gte=now - dt.timedelta(hours=1))),
    )
    total = counts["watched"]
    return {
        "watched": total,
        "within_15m": counts["within_15m"] / total if total else 1.0,
        "within_1h": counts["within_1h"] / total if total else 1.0,
    }


@dataclass(frozen=True)
class BudgetRow:
    """One application id's budget, as staff see it: requests per minute."""

    source: str
    app_id: str  # the label (first 8 hex digits of the id's SHA-256), never the id
    available: float  # requests/min the budget gives now (lowered after a 429)
    configured: float  # requests/min it gives when the marketplace is not pushing back
    used: int | None  # slots taken in the last whole minute; None where it is not counted
    error: str = ""


def budget_status(now: dt.datetime) -> list[BudgetRow]:
    """Every rate-limited marketplace's budget per application id, with the slots taken in
    the last whole minute where they are counted for every process (Redis for a fleet, the
    host's file without it; not a budget of one process's memory)."""
    rows = []
    minute = int(now.timestamp() // 60) - 1
    for source in settings.MARKETPLACE_ADAPTERS:
        try:
            budget = getattr(get_marketplace(source), "budget", None)
        except Exception:  # misconfigured: the listings say why
            log.warning("no budget for %s: its adapter cannot be built", source, exc_info=True)
            continue
        if budget is None:
            continue
        for app_id, limiter in budget.limiters.items():
            label = app_id_label(app_id)
            configured = getattr(limiter, "rate", 0.0) * 60
            try:
                available = limiter.current_rate() * 60
                used = limiter.used(minute) if hasattr(limiter, "used") else None
            except LimiterUnavailable as exc:
                rows.append(BudgetRow(source, label, 0.0, configured, None, str(exc)))
                continue
            rows.append(BudgetRow(source, label, available, configured, used))
    return rows
