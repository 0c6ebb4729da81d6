"""Shop feeds: one request answers a shop's items, most recently updated first, a page of
them (Rakuten Ichiba's `shopCode` with `sort=-updateTimestamp`). Every item on the page that
is a listing we know becomes an observation, by the one rule (`watches.polling.observations`);
items we do not know are not stored.

What a read teaches is kept per shop (`ShopFeed`), for the poll plan:

- where the last read's order resumes on this page says how many of the shop's items changed
  in between (all of them, when some item of the last read is still on the page), hence how
  fast the shop changes (`updates_per_hour`);
- a read that reached back to the last one showed every change since: while reads keep doing
  so (`complete_since`), a watched listing observed after the chain began and absent from
  the pages held its price — the plan then spends no request of its own on it.

That a price change moves an item up its shop's feed is not documented. It is measured
(`FeedCheck`: an item request soon after a feed showed the item confirms or contradicts what
the feed said, `watches.polling.observations`), and the plan uses feeds only while they are
`trusted`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any, cast

from django.db import transaction
from django.utils import timezone

from common.fields import max_length
from common.text import clip
from watches.marketplaces.base import (
    Ask,
    FetchError,
    Observation,
    Page,
    PageResult,
    PageSearch,
    Shape,
    get_marketplace,
)
from watches.models import FeedCheck, Listing, ShopFeed, Watch
from watches.polling.observations import ask

log = logging.getLogger("watches.polling.feeds")

NO_PAGE = "the marketplace did not answer for this page"
# Below this many checks the feeds are trusted; at or above it, while this share was
# confirmed.
TRUST_SAMPLES = 20
TRUST_SHARE = 0.8
# How much a new reading of a shop's pace weighs against what was learned before.
LEARNING = 0.5
_ERROR_LIMIT = max_length(ShopFeed, "last_error")


def trusted(source: str) -> bool:
    """Whether `source`'s shop feeds show what changed: not measured enough yet, or confirmed
    by item requests often enough."""
    check = FeedCheck.objects.filter(source=source).first()
    if check is None:
        return True
    checked = check.confirmed + check.contradicted
    return checked < TRUST_SAMPLES or check.confirmed >= TRUST_SHARE * checked


def read_pages(
    source: str, shops: Sequence[str], now: dt.datetime | None = None
) -> tuple[list[tuple[Listing, Observation]], dict[str, PageResult]]:
    """Page 1 of each shop's feed (one request each, through the budget; never raises), the
    listings we know among its items, each with its observation, and every shop's answer."""
    asks = [Ask(Shape.SHOP, shop) for shop in shops]
    answers = ask(source, asks, lambda adapter, some: adapter.pages(some), NO_PAGE)
    by_shop = {a.key: answers[a] for a in asks}
    return known_items(source, by_shop.values()), by_shop


def known_items(source: str, answers: Iterable[PageResult]) -> list[tuple[Listing, Observation]]:
    """(listing, observation) for every item of `answers` that is an active listing of
    `source`, each listing once (its first appearance)."""
    items = [item for page in answers if isinstance(page, Page) for item in page.items]
    codes = list(dict.fromkeys(item.item_code for item in items))
    if not codes:
        return []
    listings = {
        listing.item_code: listing
        for listing in Listing.objects.filter(source=source, item_code__in=codes, paused=False)
    }
    pairs: dict[str, tuple[Listing, Observation]] = {}
    for item in items:
        listing = listings.get(item.item_code)
        if listing is not None and item.item_code not in pairs:
            pairs[item.item_code] = (listing, item)
    return list(pairs.values())


def learn(source: str, answers: dict[str, PageResult], per_page: int) -> None:
    """Keep what each shop's page 1 taught (see the module's docstring), in one short
    transaction."""
    feeds = {
        feed.shop: feed for feed in ShopFeed.objects.filter(source=source, shop__in=list(answers))
    }
    with transaction.atomic():
        for shop, answer in answers.items():
            feed = feeds.get(shop) or ShopFeed(source=source, shop=shop)
            if isinstance(answer, FetchError):
                feed.last_error = clip(f"{answer.kind}: {answer.detail}", _ERROR_LIMIT)
            else:
                _learn_from(feed, answer, per_page)
            feed.save()


def _learn_from(feed: ShopFeed, page: Page, per_page: int) -> None:
    codes = [item.item_code for item in page.items]
    said = [[item.price, item.in_stock] for item in page.items]
    at = page.observed_at
    resumes = _where_it_resumes(codes, said, feed)
    # The shop's whole catalogue fits on the page — unless the answer says it holds more. An
    # empty page is no catalogue: a shop closed, or an answer that lost its items.
    held = len(codes) + page.unread  # what the page holds, read or not
    whole = 0 < held < per_page and (page.total is None or page.total <= held)
    if codes and feed.read_at is not None and at > feed.read_at:
        hours = (at - feed.read_at).total_seconds() / 3600
        old = feed.updates_per_hour
        if resumes is None and not whole:
            feed.updates_per_hour = _busier(old, per_page / hours, hours, per_page)
        else:
            # Changed in between: the items above where the last order resumes.
            pace = (resumes if resumes is not None else len(codes)) / hours
            feed.updates_per_hour = pace if old is None else LEARNING * pace + (1 - LEARNING) * old
    # An item it could not read may be a change of ours it does not show.
    complete = (
        bool(codes)
        and not page.unread
        and (whole or (feed.read_at is not None and resumes is not None))
    )
    if not complete or feed.complete_since is None:
        # The chain starts (again) here: from now on a read that reaches back to this one
        # shows every change made after it.
        feed.complete_since = at
    feed.read_at = at
    feed.top, feed.top_said = codes, said
    feed.last_error = ""


def _busier(old: float | None, floor: float, hours: float, per_page: int) -> float:
    """A shop's pace after a read that did not reach back to the last one: more than a page
    changed in `hours`, so the pace is at least `floor` — a bound, not a measure. Where the
    pace believed so far said the page would reach back (`old × hours ≤ per_page`), the read
    contradicts it: the belief at least doubles, so a busy shop's pace is found within a
    few reads instead of staying at the floor of the reads' own interval (which made the
    plan expect whole pages from a shop that overflows them). Where it already said the page
    would not reach back, the read tells nothing more than the floor."""
    if old is None:
        return floor
    if old * hours <= per_page:
        return max(floor, 2 * old)
    return max(floor, old)


def _where_it_resumes(codes: list[str], said: list[list[Any]], feed: ShopFeed) -> int | None:
    """Where the last read's order resumes on this page: the first item followed by the item
    that followed it last time, from which on every item of the last read still says what it
    said then (price, stock). An item that changed again moves to the top on its own, so one
    old item alone proves nothing — not even the page's last one: the changes made before it
    changed again lie below it, off the page. And items changed in their old order (a
    catalogue re-priced item by item) come back in that order: what they say tells them
    apart. None when no place on the page passes both."""
    follows = dict(pairwise(feed.top))
    # A feed read before prices were kept beside its order: the order alone.
    then = dict(zip(feed.top, feed.top_said, strict=True)) if feed.top_said else {}
    changed = [code in then and then[code] != now for code, now in zip(codes, said, strict=True)]
    for i, code in enumerate(codes[:-1]):
        if follows.get(code) == codes[i + 1] and not any(changed[i:]):
            return i
    return None


def poll_shops(source: str, shops: Sequence[str]):
    """Read page 1 of each shop's feed, keep what it says of the listings we know (judging
    their watches as polling does) and what it teaches of each shop. Returns the counts."""
    from watches.polling.poll import record_answers

    pairs, answers = read_pages(source, shops)
    result = record_answers(pairs, timezone.now(), via=Shape.SHOP)
    # Shop feeds are read only from marketplaces that answer pages (the plan asks no other).
    learn(source, answers, cast(PageSearch, get_marketplace(source)).per_page)
    result.requests = len(shops)
    return result


# Pages of one shop's feed the dispatcher's re-check reads at most, while two or more of its
# listings are still unanswered: past that, what is left is asked for item by item.
REFETCH_PAGES = 3


def answer_together(source: str, listings: Sequence[Listing]) -> dict[int, Observation]:
    """The answers a few requests can give for many of `listings` at once — for the
    dispatcher's re-check of rows whose listings share a shop: each shop with two or more of
    them is read from page 1 of its feed on (most recently updated first: a sale's items,
    just changed, come first), a page more while two or more are still missing and the
    last page was full. What is found is an answer as fresh as an item's own; what is not
    is left for a request of its own. Only where the marketplace sorts a shop's items by
    update and its feeds are `trusted`."""
    adapter = _adapter_with_feeds(source)
    if adapter is None:
        return {}
    missing: dict[str, dict[str, Listing]] = defaultdict(dict)
    for listing in listings:
        shop = adapter.shop_of(listing.item_code)
        if shop:
            missing[shop][listing.item_code] = listing
    missing = {shop: mine for shop, mine in missing.items() if len(mine) > 1}
    found: dict[int, Observation] = {}
    page = 1
    while missing and page <= REFETCH_PAGES:
        asks = [Ask(Shape.SHOP, shop, page) for shop in missing]
        answers = ask(source, asks, lambda adapter, some: adapter.pages(some), NO_PAGE)
        for shop_ask in asks:
            answer = answers[shop_ask]
            mine = missing[shop_ask.key]
            if isinstance(answer, Page):
                for item in answer.items:
                    known = mine.pop(item.item_code, None)
                    if known is not None:
                        found[known.id] = item
            # A page it could not read all of is still full: the shop has more pages.
            full = (
                isinstance(answer, Page) and len(answer.items) + answer.unread >= adapter.per_page
            )
            if not full or len(mine) < 2:
                del missing[shop_ask.key]
        page += 1
    return found


def recheck_units(watch_ids: Iterable[int]) -> dict[int, tuple[str | int, ...]]:
    """What one request of the dispatcher's re-check answers, for each of these watches' rows,
    in the order the re-check asks (`services.refetch_or_reuse`): its product's offers (a
    product watch; a listing that is an offer of a product on a marketplace that answers a
    product's offers — `products.refetch.offers_together` — unless its product's page did not
    reach it last time); its shop's feed (a listing of a marketplace whose trusted feeds
    `answer_together` reads — a sale's items come first on it); or its listing alone. Rows
    that share a unit cost about one request between them; a page that misses a listing
    costs one more for it."""
    rows = Watch.objects.filter(id__in=list(watch_ids)).values_list(
        "id",
        "product_id",
        "listing_id",
        "listing__source",
        "listing__item_code",
        "listing__product_id",
        "listing__jan",
        "listing__beyond_product_page",
    )
    unit_of = _Units()
    return {
        watch: ("product", product) if product is not None else unit_of(*listing)
        for watch, product, *listing in rows
    }


def listing_units(listings: Iterable[Listing]) -> dict[int, tuple[str | int, ...]]:
    """`recheck_units` for listings (by id): the request a listing watch's re-check of each
    would be answered by."""
    unit_of = _Units()
    return {
        listing.id: unit_of(
            listing.id,
            listing.source,
            listing.item_code,
            listing.product_id,
            listing.jan,
            listing.beyond_product_page,
        )
        for listing in listings
    }


class _Units:
    """The unit of one listing, the marketplaces' adapters and offer sources read once."""

    def __init__(self) -> None:
        self._adapters: dict[str, Any] = {}
        self._offering: set[str] | None = None

    def __call__(
        self,
        listing: int,
        source: str,
        code: str,
        offer_of: int | None,
        jan: str,
        beyond: bool,
    ) -> tuple[str | int, ...]:
        from watches.products.polling import offer_sources  # products build on polling

        if offer_of is not None and jan and not beyond:
            if self._offering is None:
                self._offering = set(offer_sources())
            if source in self._offering:
                return ("offers", source, offer_of)
        if source not in self._adapters:
            self._adapters[source] = _adapter_with_feeds(source)
        adapter = self._adapters[source]
        shop = adapter.shop_of(code) if adapter is not None else None
        return ("shop", source, shop) if shop else ("listing", listing)


def _adapter_with_feeds(source: str):
    try:
        adapter = get_marketplace(source)
    except Exception:  # misconfigured: the item requests that follow say so
        return None
    if (
        Shape.SHOP in getattr(adapter, "shapes", ())
        and getattr(adapter, "shop_by_update", False)
        and trusted(source)
    ):
        return adapter
    return None


def last_observed(polled_at: dt.datetime | None, error: str) -> dt.datetime | None:
    """When a listing was last observed with a price, as far as a feed can vouch for it: its
    last poll, unless that poll failed — its price is then from an earlier moment, which may
    lie before the feed's chain of complete reads, so no page need show a change since."""
    return None if error else polled_at


def seen_through_feeds(
    rows: Iterable[dict], feeds: dict[tuple[str, str], ShopFeed], shop_of
) -> dict[int, dt.datetime]:
    """For each listing row (`id`, `source`, `item_code`, `last_polled_at`, `last_error`)
    whose shop's feed has shown every change since before the listing was last observed,
    the moment up to which it is known unchanged (the feed's last read)."""
    seen = {}
    for row in rows:
        shop = shop_of(row["source"], row["item_code"])
        feed = feeds.get((row["source"], shop)) if shop else None
        observed = last_observed(row["last_polled_at"], row["last_error"])
        if feed is not None and feed.read_at and feed.shows_unchanged(observed):
            seen[row["id"]] = feed.read_at
    return seen


__all__ = [
    "answer_together",
    "last_observed",
    "learn",
    "poll_shops",
    "read_pages",
    "seen_through_feeds",
    "trusted",
]
