"""What a marketplace said about listings, kept: the one rule for price history and listing
state, for price polling and for the dispatcher's re-fetch alike (through `watches.services`).

For a batch of answers, `observe` reads the listings' recent history (a few queries for the
whole batch, whatever its size) and applies the rule in memory; `Observations.save` then
writes it in bulk:

- an answer with a price and stock is an observation; `empty` (listed, no offer) is one too:
  out of stock, at the last known price; any other error kind is no observation at all;
- an observation becomes a PricePoint unless nothing changed (price, shipping, stock, the
  points everyone gets) since the listing's last point and that point is younger than
  POLL_HISTORY_MIN_MINUTES — so a points campaign starting or ending is a change the history
  records;
- the listing keeps the observation as its last-seen state (`price`, `shipping`, `in_stock`,
  its points, `last_polled_at`, `last_error` cleared), fills descriptive fields still empty
  (name, shop, links), and gets `typical_price` and `low_90` — and the same after points,
  `typical_net` and `low_90_net` — recomputed from its history with this observation in it
  (`stats_at` says when) — or, for a re-fetch within `STATS_KEPT` of the last computation,
  the observation folded into them (see `observe`);
- an error is kept on the listing (`last_error`, `last_error_at`) and counts as a poll
  (`last_polled_at`), so a failing listing waits its turn like the others;
- once saved, the cached pages that show prices, and those listings' own pages, are stale
  (`watches.pages.pagecache`); a failed listing's own page is too (it says the check failed).

`fetch` asks one marketplace about item codes and never raises: an adapter that crashes or
leaves a code unanswered gives `bad_response` for it. A marketplace halted for a
configuration fault is not asked (`watches.marketplaces.halts`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Min, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from common.bulk import update_by_id
from common.fields import max_length
from common.lookups import one_of
from common.retrying import retrying
from common.text import clip
from watches.marketplaces import halts
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    Shape,
    get_marketplace,
)
from watches.models import FeedCheck, Listing, PricePoint, ShopFeed
from watches.pages import pagecache
from watches.polling.history import PointRow, as_point, latest_points, listing_stats, point_rows
from watches.triggers import LOW_WINDOW, TYPICAL_WINDOW, Point

log = logging.getLogger("watches.polling.observations")

NO_ANSWER = "the marketplace did not answer for this item"
_ERROR_LIMIT = max_length(Listing, "last_error")
_DETAIL_LIMIT = 150
_DESCRIPTIVE = ("name", "shop_name", "url", "image_url")
_POINTS = ("points", "points_until", "points_after", "point_rate", "member_points")
_OBSERVED = ("price", "shipping", "in_stock", *_POINTS, "last_polled_at", "last_error", "seen_via")
_STATS = ("typical_price", "low_90", "typical_net", "low_90_net", "stats_at")
# How long statistics computed from the history serve a re-fetch that folds its observation
# into them (`observe(…, judging=False)`). An hour moves the ends of a 30-day typical price and
# a 90-day low by well under a percent of their windows; polling recomputes them anyway.
STATS_KEPT = dt.timedelta(hours=1)
# A shop feed's word on an item is checked by a request for the item alone this soon after:
# later, the item may simply have changed since (docs/decisions, "shop feeds").
CONFIRM_WITHIN = dt.timedelta(minutes=10)
_FAILED = ("last_error", "last_error_at", "last_polled_at")
# Every column of a listing the observation rule writes (shown read-only to staff).
WRITTEN = tuple(dict.fromkeys((*_OBSERVED, *_STATS, *_FAILED)))


# One past point as `_recent` reads it: (listing id, observed_at, price, shipping, in_stock,
# points).
_Past = PointRow


class Seen(NamedTuple):
    """One listing's answer, as the rule read it."""

    listing: Listing
    result: FetchResult  # what the marketplace said
    observation: Observation | None  # what it tells of price and stock; None for an error
    past: Sequence[Point] = ()  # the listing's history before this observation
    past_net: Sequence[Point] = ()  # the same, each point after points (`net_price`)


@dataclass
class Observations:
    """A batch of answers applied to its listings in memory, ready to be saved."""

    seen: list[Seen] = field(default_factory=list)
    # The points `save` wrote (empty until then).
    points: list[PricePoint] = field(default_factory=list)
    observed: list[Listing] = field(default_factory=list)
    failed: list[Listing] = field(default_factory=list)
    described: list[Listing] = field(default_factory=list)
    # Listings whose answer was folded into their statistics: id -> the answer's in-stock
    # effective price and price after points (None when out of stock or without one), which
    # `save` lowers the stored 90-day lows to.
    folded: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    # Every observation, each written as a point unless its listing's latest point before
    # it says the same and is younger than POLL_HISTORY_MIN_MINUTES: decided in `save`, on
    # the history as it is under the listings' locks (`_still_worth_writing`) — a point
    # another process kept after `observe` read the history is what it compares with.
    unless_unchanged: list[tuple[Listing, Observation]] = field(default_factory=list)
    # Per marketplace, how many of a shop feed's answers — what it showed, and what a
    # complete read of it took for unchanged by not showing it — an item request soon after
    # confirmed (True) or contradicted (False): what `FeedCheck` keeps.
    checks: Counter[tuple[str, bool]] = field(default_factory=Counter)

    def save(self) -> None:
        """Write the batch: new points, then each group of listings with only the fields this
        batch learned — staff may have edited the rest (a name, units per pack, `paused`)
        while the marketplace was being asked. One transaction, run again when the database
        ends it to break a deadlock (`common.retrying`): the answers were paid for."""
        retrying(self._write)

    def _write(self) -> None:
        folded = [listing for listing in self.observed if listing.id in self.folded]
        observed = _values_of(_OBSERVED)
        computed = [listing for listing in self.observed if listing.id not in self.folded]
        with transaction.atomic():
            _lock_in_id_order([*self.observed, *self.failed, *self.described])
            self.points = _still_worth_writing(self.unless_unchanged)
            PricePoint.objects.bulk_create(self.points, batch_size=500)
            # Every state below is written only over an older one (`unless_later`): a poll
            # and a re-fetch that asked at nearly the same time may save in either order, and
            # the later observation is the listing's state — an older one written over it
            # would be served as fresh to the next dispatcher (`fresh_observations`).
            _update(computed, (*_OBSERVED, *_STATS), unless_later="last_polled_at")
            # A folded answer lowers the 90-day low as the statement finds it, not as it was
            # loaded: a poll or another dispatcher may have computed or folded newer
            # statistics since (a lower low above all), and those stay; the typical price
            # and `stats_at` are theirs, untouched.
            update_by_id(
                Listing,
                (*_OBSERVED, "low_90", "low_90_net"),
                (
                    (listing.id, [*observed(listing), *self.folded[listing.id]])
                    for listing in folded
                ),
                locked=True,
                lowering=("low_90", "low_90_net"),
                unless_later="last_polled_at",
            )
            _update(self.failed, _FAILED, unless_later="last_polled_at")
            _update(self.described, _DESCRIPTIVE)
            _count_checks(self.checks)
            changed = [listing.id for listing in (*self.observed, *self.described)]
            if changed:
                # Cached pages show prices: stale once this is committed, not before (a page
                # rendered in between would cache the old ones under the new version).
                transaction.on_commit(lambda: pagecache.listings_changed(changed))
            failed = [listing.id for listing in self.failed]
            if failed:
                # Their own pages say the last check failed; no price changed elsewhere.
                transaction.on_commit(lambda: pagecache.listing_pages_changed(failed))


def _still_worth_writing(answers: list[tuple[Listing, Observation]]) -> list[PricePoint]:
    """The points of those (listing, answer) pairs that `_worth_writing` keeps, judged
    against each listing's latest point before its answer as the history is now: called with
    the listings' locks held (`_lock_in_id_order`; on SQLite, the write lock), so a point
    another process kept after the answer came, even one stamped before it, is what
    "unchanged" compares with. A listing whose latest point is not older than its answer
    (rare) is sought before that moment."""
    if not answers:
        return []
    quiet = dt.timedelta(minutes=settings.POLL_HISTORY_MIN_MINUTES)
    at = {listing.id: observation.observed_at for listing, observation in answers}
    latest = latest_points(list(at))
    again: dict[dt.datetime, list[int]] = defaultdict(list)
    for pk, row in latest.items():
        if row[1] >= at[pk]:
            again[at[pk]].append(pk)
    for moment, ids in again.items():
        for pk in ids:
            del latest[pk]
        latest.update(latest_points(ids, before=moment))
    return [
        PricePoint.from_observation(listing, observation)
        for listing, observation in answers
        if _worth_writing(observation, [latest[listing.id]] if listing.id in latest else [], quiet)
    ]


def _count_checks(checks: Counter[tuple[str, bool]]) -> None:
    for (source, confirmed), count in sorted(checks.items()):
        FeedCheck.objects.get_or_create(source=source)
        column = "confirmed" if confirmed else "contradicted"
        FeedCheck.objects.filter(source=source).update(**{column: F(column) + count})


def _lock_in_id_order(listings: list[Listing]) -> None:
    """Take the row locks of every listing this batch writes, lowest id first. Two batches
    (a poll and a dispatcher's re-fetch, or two dispatchers) that share listings would
    otherwise lock them in the order of their groups and deadlock on PostgreSQL. SQLite locks
    the whole database as the transaction begins (BEGIN IMMEDIATE): nothing to order there."""
    if not listings or not connection.features.has_select_for_update:
        return
    ids = sorted({listing.id for listing in listings})
    locking = Listing.objects.filter(one_of("pk", ids)).order_by("pk").select_for_update()
    list(locking.values_list("pk"))


def _values_of(fields: tuple[str, ...]) -> Callable[[Listing], tuple]:
    """A listing's values of `fields` as a tuple, read in C (attrgetter of one name gives the
    value alone)."""
    if len(fields) > 1:
        return attrgetter(*fields)
    return lambda listing: (getattr(listing, fields[0]),)


def _update(
    listings: list[Listing], fields: tuple[str, ...], unless_later: str | None = None
) -> None:
    values = _values_of(fields)
    update_by_id(
        Listing,
        fields,
        ((listing.id, values(listing)) for listing in listings),
        locked=True,  # by _lock_in_id_order, in the same transaction
        unless_later=unless_later,
    )


def fetch(source: str, codes: Sequence[str]) -> dict[str, FetchResult]:
    """One answer for every item code from `source`'s adapter; see `ask`."""
    return ask(source, codes, lambda adapter, some: adapter.fetch(some))


_K = TypeVar("_K", bound=Hashable)  # what an answer is keyed by: a code, a JAN, an Ask


def ask(
    source: str,
    codes: Sequence[_K],
    request: Callable[[Any, Sequence[_K]], Mapping[_K, Any]],
    unanswered: str = NO_ANSWER,
) -> dict[_K, Any]:
    """`request(adapter, codes)` of `source`'s adapter, one answer for every code. Never
    raises: a bug or a misconfiguration in the adapter is logged and answers `bad_response`
    for every code, and a code the adapter left unanswered gets `bad_response` (`unanswered`)
    too. A marketplace halted for a configuration fault is not asked: every code answers the
    halt's `config` error, but for the one probe it allows (`watches.marketplaces.halts`)."""

    def send(some: Sequence[_K]) -> dict[_K, Any]:
        try:
            answers = request(get_marketplace(source), some)
        except Exception as exc:  # an adapter's bug must not stop polling or a dispatch cycle
            log.exception("marketplace %s failed", source)
            detail = clip(f"{type(exc).__name__}: {exc}", _DETAIL_LIMIT)
            return {code: FetchError(FetchKind.BAD_RESPONSE, detail) for code in some}
        missing = FetchError(FetchKind.BAD_RESPONSE, unanswered)
        return {code: answers.get(code) or missing for code in some}

    return halts.guard(source, codes, send, timezone.now())


def fresh_observations(
    listings: Sequence[Listing],
    since: dt.datetime,
    *,
    as_loaded: bool = False,
    now: dt.datetime | None = None,
) -> dict[int, Observation]:
    """The last-seen state of those `listings` last observed (not failed) at or after
    `since`, read fresh in one query, as the Observations they were; the listings are given
    that state in memory too. With `as_loaded`, the caller read the listings from the
    database a moment ago (the dispatcher, in the same batch): their state is taken as it is,
    without reading it again. A state whose points campaign has ended by `now` is no answer
    any more: what the shop gives since is not in it, so the marketplace is asked."""
    now = now or timezone.now()
    if not listings:
        return {}
    if as_loaded:
        current = [
            listing
            for listing in listings
            if listing.last_polled_at is not None
            and listing.last_polled_at >= since
            and not listing.last_error
        ]
    else:
        by_id = {listing.id: listing for listing in listings}
        rows = Listing.objects.filter(
            one_of("pk", list(by_id)), last_polled_at__gte=since, last_error=""
        ).values_list("pk", *_OBSERVED, *_STATS)
        current = []
        for pk, *values in rows:
            listing = by_id[pk]
            for name, value in zip((*_OBSERVED, *_STATS), values, strict=True):
                setattr(listing, name, value)
            current.append(listing)
    fresh: dict[int, Observation] = {}
    for listing in current:
        if listing.price is None or listing.in_stock is None or listing.last_polled_at is None:
            continue  # never observed with a price: ask the marketplace
        if listing.points_until is not None and listing.points_until <= now:
            continue  # its campaign ended since: ask what the shop gives now
        fresh[listing.id] = Observation(
            item_code=listing.item_code,
            price=listing.price,
            shipping=listing.shipping,
            in_stock=listing.in_stock,
            observed_at=listing.last_polled_at,
            **_points_of(listing),
        )
    return fresh


def observed_since(listings: Sequence[Listing], since: dt.datetime) -> list[Listing]:
    """Those of `listings` the database says were observed (not failed) at or after `since`:
    one query of their ids, for a caller that expects few (`fresh_observations` then reads
    their state)."""
    if not listings:
        return []
    ids = set(
        Listing.objects.filter(
            one_of("pk", [listing.id for listing in listings]),
            last_polled_at__gte=since,
            last_error="",
        ).values_list("pk", flat=True)
    )
    return [listing for listing in listings if listing.id in ids]


def _points_of(listing: Listing) -> dict[str, Any]:
    return {name: getattr(listing, name) for name in _POINTS}


def as_observation(listing: Listing, result: FetchResult, now: dt.datetime) -> Observation | None:
    """What an answer tells of price and stock: the observation itself; for `empty`, out of
    stock at the listing's last known price, observed `now`; nothing for another error."""
    if isinstance(result, Observation):
        return result
    if result.kind == FetchKind.EMPTY:
        return Observation(
            item_code=listing.item_code,
            price=listing.price,
            shipping=listing.shipping,
            in_stock=False,
            observed_at=now,
            **_points_of(listing),
        )
    return None


def observe(
    answers: Iterable[tuple[Listing, FetchResult]],
    now: dt.datetime,
    *,
    judging: bool = True,
    via: Shape = Shape.ITEM,
) -> Observations:
    """Apply the rule to each (listing, answer) of a batch of distinct listings, in memory:
    the listings are updated, the points to write collected; nothing is written.

    `judging`: the caller judges triggers on each listing's past (polling), so every point of
    the last 90 days is read and handed back in `Seen.past`, and the statistics are computed
    from them. A caller that judges nothing (the dispatcher's re-fetch) gets the same rule
    from less, and `Seen.past` is then partial:

    - a listing whose statistics were computed from its history within `STATS_KEPT` (by the
      poll that detected the crossing, as a rule) has its observation folded into them and
      nothing of its history read here;
    - any other listing has them computed from the last 30 days (and the point before them)
      for the typical price and one MIN per listing in the database for the older part of the
      90-day low — reading the history was most of a re-fetch's cost.

    Whether an observation's point is worth writing is decided as the batch is saved, for
    every caller (`Observations.unless_unchanged`): the history read here may miss a point
    another process keeps before then.

    `via`: the shape of the request that answered (one item, a shop's feed, a product's
    offers). An item's own answer that comes soon after its shop's feed showed it checks
    what the feed said (`Observations.checks`)."""
    answers = list(answers)
    ids = [listing.id for listing, _ in answers]
    # Listings a complete read of their shop's feed just took for unchanged (it did not show
    # them): an item's own answer now checks that.
    quiet = _read_unchanged(answers, now) if via == Shape.ITEM else {}
    folding: set[int] = set()
    if judging:
        past, older_lows = _recent(ids, now, LOW_WINDOW), {}
    else:
        kept_since = now - STATS_KEPT
        folding = {
            listing.id
            for listing, _ in answers
            if listing.stats_at is not None and listing.stats_at >= kept_since
        }
        computing = [pk for pk in ids if pk not in folding]
        past = _recent(computing, now, TYPICAL_WINDOW)
        older_lows = _lows_before(computing, now - LOW_WINDOW, now - TYPICAL_WINDOW)
    batch = Observations()
    for listing, result in answers:
        observation = as_observation(listing, result, now)
        if observation is None:
            assert isinstance(result, FetchError)  # as_observation answers every Observation
            listing.last_error = clip(f"{result.kind}: {result.detail}", _ERROR_LIMIT)
            listing.last_error_at = listing.last_polled_at = now
            batch.failed.append(listing)
            batch.seen.append(Seen(listing, result, None))
            continue
        at = observation.observed_at
        folded = listing.id in folding
        # What a feed shows is what a price change moves: the points are not compared.
        said = (listing.price, listing.shipping, listing.in_stock)
        now_says = (observation.price, observation.shipping, observation.in_stock)
        if via == Shape.ITEM and listing.seen_via == Shape.SHOP and _soon_after(listing, at):
            # The feed showed it: does the item say what the feed said?
            batch.checks[(listing.source, said == now_says)] += 1
        elif listing.id in quiet and at - quiet[listing.id] <= CONFIRM_WITHIN:
            # The feed did not show it, so it was taken for unchanged: was it? (A change in
            # the minutes since the read counts against the feed too: rare, and on the
            # safe side.)
            batch.checks[(listing.source, said == now_says)] += 1
        listing.seen_via = via
        batch.unless_unchanged.append((listing, observation))
        if _remember(listing, observation):
            batch.described.append(listing)
        # The pages sort and chart by these: kept current with every observation.
        if folded:
            batch.folded[listing.id] = _fold(listing, observation)
            # Folded: no statistics from the history, no judging.
            points: list[Point] = []
            nets: list[Point] = []
        else:
            # Only what came before this observation (another process may have written since).
            before = [p for p in past.get(listing.id, ()) if p[1] < at]
            points = [as_point(row) for row in before]
            nets = [as_point(row, after_points=True) for row in before]
            fresh = Point(at, observation.effective_price, observation.in_stock)
            fresh_net = Point(at, observation.net_price, observation.in_stock)
            listing.typical_price, listing.low_90 = listing_stats([*points, fresh], at)
            listing.typical_net, listing.low_90_net = listing_stats([*nets, fresh_net], at)
            older, older_net = older_lows.get(listing.id, (None, None))
            listing.low_90 = _lower(listing.low_90, older)
            listing.low_90_net = _lower(listing.low_90_net, older_net)
            listing.stats_at = at
        batch.observed.append(listing)
        batch.seen.append(Seen(listing, result, observation, points, nets))
    return batch


def _lower(low: int | None, other: int | None) -> int | None:
    if other is not None and (low is None or other < low):
        return other
    return low


def _read_unchanged(
    answers: list[tuple[Listing, FetchResult]], now: dt.datetime
) -> dict[int, dt.datetime]:
    """The listings of `answers` whose shop's feed was read, less than CONFIRM_WITHIN before
    `now`, from before their last observation on without showing them (the poll plan's
    "known": `feeds.seen_through_feeds`), each with that read's moment. Only where the
    marketplace sorts a shop's feed by update time."""
    by_source: dict[str, list[Listing]] = defaultdict(list)
    for listing, _ in answers:
        if listing.last_polled_at is not None:
            by_source[listing.source].append(listing)
    found: dict[int, dt.datetime] = {}
    for source, listings in by_source.items():
        adapter = _sorted_by_update(source)
        if adapter is None:
            continue
        shops = {listing.id: adapter.shop_of(listing.item_code) for listing in listings}
        feeds = {
            feed.shop: feed
            for feed in ShopFeed.objects.filter(
                source=source,
                shop__in=sorted({shop for shop in shops.values() if shop}),
                complete_since__isnull=False,
                read_at__gte=now - CONFIRM_WITHIN,
            )
        }
        for listing in listings:
            feed = feeds.get(shops[listing.id] or "")
            observed = None if listing.last_error else listing.last_polled_at
            if feed is not None and feed.read_at and feed.shows_unchanged(observed):
                found[listing.id] = feed.read_at
    return found


def _sorted_by_update(source: str) -> Any:
    """`source`'s adapter when it sorts a shop's feed by update time, else None."""
    try:
        adapter = get_marketplace(source)
    except Exception:  # misconfigured (a test's answers, made by hand): no feed to check
        return None
    return adapter if getattr(adapter, "shop_by_update", False) else None


def _soon_after(listing: Listing, at: dt.datetime) -> bool:
    return listing.last_polled_at is not None and at - listing.last_polled_at <= CONFIRM_WITHIN


def _fold(listing: Listing, observation: Observation) -> tuple[int | None, int | None]:
    """The statistics as of `observation`, from those computed at `listing.stats_at` (no
    longer than STATS_KEPT ago): the typical price weighs each price by how long it held, and
    the observation has held for no time yet, so it stays; the 90-day low takes the price if
    lower — incl. shipping and after points alike. What they leave out — the windows' ends
    having moved on by under STATS_KEPT — the next computation from the history catches up
    (`stats_at` is left as it was). Returns the prices folded in (incl. shipping, after
    points), or Nones; `Observations.save` lowers the stored 90-day lows to them in the
    UPDATE itself (a lower one written meanwhile stays)."""
    price, net = observation.effective_price, observation.net_price
    if not observation.in_stock or price is None:
        return None, None
    listing.low_90 = _lower(listing.low_90, price)
    listing.low_90_net = _lower(listing.low_90_net, net)
    return price, net


def _recent(
    listing_ids: list[int], now: dt.datetime, window: dt.timedelta
) -> dict[int, list[_Past]]:
    """The points of these listings within `window` of `now`, oldest first, in one query;
    with a window shorter than 90 days, each listing's latest point before it too (the price
    that still held when the window began: the typical price weighs it). A listing with no
    point that recent gets its latest point alone (what "unchanged" compares with)."""
    by_listing: dict[int, list[_Past]] = defaultdict(list)
    for row in point_rows(listing_ids, now - window):
        by_listing[row[0]].append(row)
    before_window = listing_ids if window < LOW_WINDOW else []
    stale = [listing_id for listing_id in listing_ids if listing_id not in by_listing]
    for listing_id, row in latest_points(before_window or stale, before=now - window).items():
        by_listing[listing_id].insert(0, row)
    return by_listing


def _lows_before(
    listing_ids: list[int], since: dt.datetime, until: dt.datetime
) -> dict[int, tuple[int, int]]:
    """Each listing's lowest in-stock effective price and price after points observed in
    [since, until): the part of the 90-day lows a 30-day read does not see, as the rule
    computes them."""
    if not listing_ids:
        return {}
    total = F("price") + Coalesce(F("shipping"), Value(0))
    rows = (
        PricePoint.objects.filter(
            one_of("listing_id", listing_ids),
            observed_at__gte=since,
            observed_at__lt=until,
            in_stock=True,
            price__isnull=False,
        )
        .values("listing_id")
        .annotate(
            low=Min(total),
            low_net=Min(Greatest(total - Coalesce(F("points"), Value(0)), Value(0))),
        )
        .order_by()
    )
    return {row["listing_id"]: (row["low"], row["low_net"]) for row in rows}


def _worth_writing(observation: Observation, before: list[_Past], quiet: dt.timedelta) -> bool:
    if not before:
        return True
    _, last_at, price, shipping, in_stock, points = before[-1]
    # A point kept before points were read (None) says nothing of them: no change there.
    said = (price, shipping, in_stock, observation.points if points is None else points)
    now_says = (observation.price, observation.shipping, observation.in_stock, observation.points)
    changed = said != now_says
    return changed or observation.observed_at - last_at >= quiet


def _remember(listing: Listing, observation: Observation) -> bool:
    """The listing's last-seen state. Descriptive fields only fill what is still empty, so
    staff's edits and a shop's renaming spree do not fight; True when one was filled."""
    listing.price = observation.price
    listing.shipping = observation.shipping
    listing.in_stock = observation.in_stock
    for name in _POINTS:
        setattr(listing, name, getattr(observation, name))
    listing.last_polled_at = observation.observed_at
    listing.last_error = ""
    filled = False
    for name in _DESCRIPTIVE:
        value = getattr(observation, name)
        if value and not getattr(listing, name):
            setattr(listing, name, value)
            filled = True
    return filled
