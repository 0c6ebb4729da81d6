"""The poll plan: which due listings a polling run asks about, in what order, within the
requests the marketplace's budget allows.

A rate-limited marketplace (its adapter has a `budget`, `watches.marketplaces.ratelimit`)
gives a run `rate × min(POLL_MAX_SECONDS, 60 × POLL_EVERY_MINUTES) × (1 − POLL_REFETCH_SHARE)`
requests: what the fleet's rate allows in the time a run may take before the next one
starts, minus the share kept for the dispatcher's re-fetches of the same ids. With the
defaults (a run every 2 minutes of at most 120 s) polling spends 80 % of each id's
allowance. A marketplace without a budget (the demo) gives every due listing.

The requests go by priority:
0. a quarter of the run's requests (OLDEST_SHARE, rounded down) to the watched listings
   checked longest ago, whatever their score: without it a listing far from every line
   waits for ever whenever the listings near one fill the budget (bench/bench_capacity.py
   measured a quarter of the watched listings never checked in 3 hours at 4 ids, while
   oldest-first checked them all), and the overview's "checked within 1 h" falls with it;
1. listings with live watches, highest score first, where the score is
   `(4 × closeness + popularity + volatility) × staleness`:
   - closeness, 0–1: how near the listing's price is to making one of its watches fire —
     1 at or past the line, ½ at 5 % away (a target price, the line of a price drop, the
     90-day low; back-in-stock watches are close while the listing is out of stock);
   - popularity, 0–1: log10(1 + live watches) / 3 (1,000 watches is 1);
   - volatility, 0–1: how far the 90-day low dips below the typical price, 20 % being 1;
   - staleness: polling intervals since the last poll, at most 4 (never polled: 4), so a
     listing far from any line still comes up when it has waited long enough;
   closeness weighs four times the rest: a listing a watcher is about to be told about
   goes before a popular one whose price is nowhere near;
2. unwatched listings with what is left, least recently polled first.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Max, Min, Q, QuerySet

from watches.marketplaces import halts
from watches.marketplaces.base import get_marketplace
from watches.marketplaces.ratelimit import LimiterUnavailable, app_id_label
from watches.models import Listing, Trigger, Watch, effective_price, unit_price
from watches.triggers import DEFAULT_DROP_PERCENT

log = logging.getLogger("watches.polling.plan")

CLOSE_AT = 0.05  # relative distance to the line at which closeness is ½
VOLATILE_AT = 0.20  # dip of the 90-day low below typical at which volatility is 1
CLOSENESS_WEIGHT = 4.0
MAX_STALENESS = 4.0
OLDEST_SHARE = 0.25  # of a run's requests, to the watched listings checked longest ago


@dataclass(frozen=True)
class Planned:
    listing_id: int
    source: str
    watched: bool
    score: float


@dataclass
class WatchGroup:
    """Live watches of one listing with one trigger: the one nearest its line decides."""

    trigger: str
    use_unit_price: bool
    count: int
    highest_target: int | None
    smallest_drop: int | None


def run_budget(source: str) -> int | None:
    """Requests a polling run may spend on `source`; None when its adapter has no budget.
    An unreachable shared budget gives nothing: the run then polls nothing of `source`. An
    adapter that cannot even be built has no budget: fetching then records its error on
    each listing, as it always did."""
    try:
        adapter = get_marketplace(source)
    except Exception:  # misconfigured: polling tells staff per listing (polling.observations)
        log.warning("no budget for %s: its adapter cannot be built", source, exc_info=True)
        return None
    budget = getattr(adapter, "budget", None)
    if budget is None:
        return None
    try:
        rate = budget.current_rate()
    except LimiterUnavailable:
        return 0
    share = 1 - settings.POLL_REFETCH_SHARE
    # A run may take POLL_MAX_SECONDS, but the next one starts after POLL_EVERY_MINUTES:
    # planning more than that interval's requests would only make runs overlap.
    seconds = min(settings.POLL_MAX_SECONDS, settings.POLL_EVERY_MINUTES * 60)
    return max(0, math.floor(rate * seconds * share))


def plan(
    listings: QuerySet[Listing],
    now: dt.datetime,
    *,
    budgets: dict[str, int | None] | None = None,
    groups: dict[int, list[WatchGroup]] | None = None,
) -> list[Planned]:
    """Order `listings` (given least recently polled first, as `due_listings` does; that
    order also breaks ties) by the plan and keep, per source, as many as its budget allows
    (`budgets` given, or asked of each adapter). Two queries: the listings, and their live
    watches grouped (`groups`, when the caller has them from `watch_groups`: the capacity
    bench, whose watches do not change while it runs)."""
    rows = list(
        listings.values(
            "id",
            "source",
            "price",
            "shipping",
            "in_stock",
            "units_per_pack",
            "typical_price",
            "low_90",
            "last_polled_at",
        )
    )
    if groups is None:
        groups = watch_groups(listings)
    planned: list[Planned] = []
    interval = dt.timedelta(minutes=settings.POLL_MINUTES)
    for row in rows:
        mine = groups.get(row["id"])
        score = _score(row, mine, now, interval) if mine else 0.0
        planned.append(Planned(row["id"], row["source"], bool(mine), score))
    budgets = dict(budgets or {})
    left: dict[str, int | None] = {
        source: budgets[source] if source in budgets else run_budget(source)
        for source in dict.fromkeys(item.source for item in planned)
    }
    # A marketplace halted for a configuration fault gets its probe, or nothing.
    left = halts.within_halts(left, now)
    # The longest unchecked watched listings first, a share of each budget (in the order
    # given); then watched by score, the rest keeping their order (a stable sort).
    oldest = _oldest_watched(planned, left)
    ranked = [item for item in planned if item.listing_id not in oldest]
    ranked.sort(key=lambda item: (not item.watched, -item.score))
    chosen = []
    for item in [*oldest.values(), *ranked]:
        remaining = left[item.source]
        if remaining is not None:
            if remaining <= 0:
                continue
            left[item.source] = remaining - 1
        chosen.append(item)
    return chosen


def _oldest_watched(planned: list[Planned], budgets: dict[str, int | None]) -> dict[int, Planned]:
    """The first OLDEST_SHARE of each budget's requests: watched listings in the order given."""
    quota = {
        source: math.floor(OLDEST_SHARE * budget)
        for source, budget in budgets.items()
        if budget is not None
    }
    oldest: dict[int, Planned] = {}
    for item in planned:
        if item.watched and quota.get(item.source, 0) > 0:
            quota[item.source] -= 1
            oldest[item.listing_id] = item
    return oldest


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


def _score(row: dict, groups: list[WatchGroup], now: dt.datetime, interval: dt.timedelta) -> float:
    """The plan's score of one watched listing (`interval`: POLL_MINUTES). A run scores every
    due listing — 95,000 at each run in bench_capacity — so this stays in floats."""
    closeness = max([_closeness(row, group) for group in groups])
    watches = sum(group.count for group in groups)
    popularity = min(1.0, math.log10(1 + watches) / 3)
    volatility = 0.0
    typical, low = row["typical_price"], row["low_90"]
    if typical and low is not None:
        volatility = min(1.0, max(0.0, (typical - low) / typical) / VOLATILE_AT)
    if row["last_polled_at"] is None:
        staleness = MAX_STALENESS
    else:
        waited = (now - row["last_polled_at"]) / interval
        staleness = min(MAX_STALENESS, max(0.0, waited))
    return (CLOSENESS_WEIGHT * closeness + popularity + volatility) * staleness


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
    """Every rate-limited marketplace's budget per application id. Slots taken are counted
    only in the fleet's shared budget (Redis): a process-local limiter speaks for its own
    process, which is not this one."""
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
