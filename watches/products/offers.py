"""A product's offers, judged together: which is the best now, and the product's history as
its cheapest offer over time.

Every offer of one product is the same pack (one JAN code), so the cheapest per pack is the
cheapest per unit too: offers are ranked by their price after points (price plus shipping
where known, less the points everyone gets: `watches.models.net_price`) — or, for a watch
that judges on the price incl. shipping, by that (`after_points=False`) — and at the same
price an offer whose shipping is known comes first. An offer whose shipping is unknown is
compared without it — the listing rule — and every page and message says its shipping is
unknown; it is never taken for free.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from django.db.models import OuterRef, Subquery

from watches.models import Listing, PricePoint, Product, effective_price, net_price
from watches.polling.history import PointRow, point_rows
from watches.triggers import Point


class OfferLike(Protocol):
    @property
    def price(self) -> int | None: ...
    @property
    def shipping(self) -> int | None: ...
    @property
    def in_stock(self) -> bool | None: ...
    @property
    def points(self) -> int: ...


OfferT = TypeVar("OfferT", bound=OfferLike)


def points_of(offer: OfferLike) -> int:
    """The points everyone gets on `offer` now: a listing's as they are now (its campaign
    may have ended since it was seen), an observation's as answered."""
    now = getattr(offer, "points_now", None)
    return now if now is not None else offer.points or 0


def rank(
    offer: OfferLike, *, after_points: bool = True, members: bool = False
) -> tuple[int, bool, int]:
    """The order of offers, cheapest first: price after points (or incl. shipping only),
    then known shipping first, then the lower price before shipping. With `members`, the
    member-only points count too (`watches.triggers.members_count`: a premium member's own
    target after points): a shop cheapest only for members is the best offer for them."""
    price = offer.price if offer.price is not None else 0
    points = points_of(offer) if after_points else 0
    if after_points and members:
        points += getattr(offer, "member_points", 0) or 0
    total = net_price(offer.price, offer.shipping, points)
    return (total if total is not None else 0, offer.shipping is None, price)


def in_stock(offers: Iterable[OfferT]) -> list[OfferT]:
    return [offer for offer in offers if offer.in_stock and offer.price is not None]


def best_offer(
    offers: Iterable[OfferT], *, after_points: bool = True, members: bool = False
) -> OfferT | None:
    """The cheapest offer in stock (after points, unless told otherwise; with `members`, the
    member-only points too), or None when no shop has it."""
    available = in_stock(offers)
    if not available:
        return None
    return min(available, key=lambda offer: rank(offer, after_points=after_points, members=members))


def on_products_pack(offer: Listing, product: Product) -> Listing:
    """`offer` priced per unit on `product`'s pack, as its watches judge and tell it (one JAN
    code, one pack: decision 0084): a copy, so the offer as stored keeps what its own page
    says — a listing tracked by its link keeps its own pack size when it joins a product."""
    priced = copy.copy(offer)
    priced.units_per_pack, priced.unit_label = product.units_per_pack, product.unit_label
    return priced


def typical_price(offers: Iterable[Listing]) -> int | None:
    """What the product usually costs: the lowest of its offers' typical prices. A product
    is cheap now only when its best offer beats what even the cheapest shop usually asks
    (`watches.search.query.cheap_now` judges by the same rule)."""
    typicals = [
        typical
        for offer in offers
        if (typical := offer.typical_net or offer.typical_price)  # after points, where known
    ]
    return min(typicals) if typicals else None


def offers_with_newest_point(product: Product) -> list[Listing]:
    """Every offer of `product`, paused ones too (its history reads them), in id order, each
    with `newest_point_at` — when its newest price point was observed: the product's history
    changes only with those (points are only ever added), so a page caches its chart under
    them. One query, one index step per offer."""
    newest = (
        PricePoint.objects.filter(listing=OuterRef("pk"))
        .order_by("-observed_at")
        .values("observed_at")[:1]
    )
    offers = Listing.objects.filter(product=product).annotate(newest_point_at=Subquery(newest))
    return list(offers.order_by("id"))


def offers_by_product(product_ids: Iterable[int]) -> dict[int, list[Listing]]:
    """Each product's tracked offers (not paused), with the product, in one query."""
    ids = set(product_ids)
    offers: dict[int, list[Listing]] = defaultdict(list)
    if ids:
        tracked = Listing.objects.filter(product_id__in=ids, paused=False).select_related("product")
        for offer in tracked.order_by("id"):
            assert offer.product_id is not None  # filtered on it above
            offers[offer.product_id].append(offer)
    return offers


def cheapest_points(rows: Iterable[PointRow], *, after_points: bool = False) -> list[Point]:
    """The product's history from its offers' points (listing id, observed_at, price,
    shipping, in_stock, points): at each moment an offer was observed, the cheapest price
    incl. shipping — or after points — among the offers then in stock, and whether any was.
    Offers keep their last observed state between their points (history skips writing
    unchanged prices), and points of the same moment (one request for every offer) make one
    point of the product."""
    by_time: dict[dt.datetime, list[PointRow]] = defaultdict(list)
    for row in rows:
        by_time[row[1]].append(row)
    state: dict[int, tuple[int | None, bool]] = {}
    points: list[Point] = []
    for at in sorted(by_time):
        for listing_id, _, price, shipping, stocked, given in by_time[at]:
            value = (
                net_price(price, shipping, given)
                if after_points
                else effective_price(price, shipping)
            )
            state[listing_id] = (value, stocked)
        prices = [total for total, stocked in state.values() if stocked and total is not None]
        anywhere = any(stocked for _, stocked in state.values())
        points.append(Point(at, min(prices) if prices else None, anywhere))
    return points


def product_points(
    product_ids: Sequence[int],
    since: dt.datetime,
    *,
    before: dt.datetime | None = None,
    after_points: bool = False,
    tracked: bool = False,
) -> dict[int, list[Point]]:
    """Each product's cheapest-offer history since `since` (and before `before`), oldest
    first, in two queries: incl. shipping, or after points. `tracked`: of the offers not
    paused only, as detection judges them — a paused offer's last state, carried forward
    while nobody observes it, would keep the product "in stock somewhere" at its old price
    for as long as the window holds it."""
    offers_of = Listing.objects.filter(product_id__in=list(product_ids))
    if tracked:
        offers_of = offers_of.filter(paused=False)
    offers = dict(offers_of.values_list("id", "product_id"))
    rows: dict[int, list[PointRow]] = defaultdict(list)
    for row in point_rows(offers, since):
        if before is None or row[1] < before:
            rows[offers[row[0]]].append(row)
    return {
        product_id: cheapest_points(rows.get(product_id, ()), after_points=after_points)
        for product_id in product_ids
    }
