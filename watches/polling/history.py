"""Reading listings' price history in bulk, and the summary the pages sort by."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from django.db import transaction
from django.db.models import Max, OuterRef, Subquery
from django.utils import timezone

from common.bulk import update_by_id
from common.lookups import one_of
from watches.models import Listing, PricePoint, effective_price
from watches.pages import pagecache
from watches.triggers import LOW_WINDOW, Point, summary

PointRow = tuple[int, dt.datetime, int | None, int | None, bool]
POINT_COLUMNS = ("listing_id", "observed_at", "price", "shipping", "in_stock")


def point_rows(listing_ids: Iterable[int], since: dt.datetime) -> Iterator[PointRow]:
    """(listing id, observed_at, price, shipping, in_stock) of every point of these listings
    observed since `since`, by listing then time, in one query."""
    ids = list(listing_ids)
    if not ids:
        return
    points = PricePoint.objects.filter(one_of("listing_id", ids), observed_at__gte=since)
    yield from (
        points.order_by("listing_id", "observed_at", "id")
        .values_list(*POINT_COLUMNS)
        .iterator(chunk_size=5000)
    )


def latest_points(
    listing_ids: Iterable[int], before: dt.datetime | None = None
) -> dict[int, PointRow]:
    """Each listing's latest point (observed before `before`, when given), in one query: one
    step down the (listing, observed_at) index per listing. A listing without one is left
    out."""
    ids = list(listing_ids)
    if not ids:
        return {}
    points = PricePoint.objects.filter(listing=OuterRef("pk"))
    if before is not None:
        points = points.filter(observed_at__lt=before)
    newest = points.order_by("-observed_at", "-pk").values("pk")[:1]
    latest = Listing.objects.filter(one_of("pk", ids)).values(point=Subquery(newest))
    rows = PricePoint.objects.filter(pk__in=latest).values_list(*POINT_COLUMNS)
    return {row[0]: row for row in rows}


def newest_point_at(listing_id: int) -> dt.datetime | None:
    """When the listing's newest point was observed (None without one): what its chart is
    drawn from changes with it, as points are only ever added at the time of an
    observation."""
    newest = PricePoint.objects.filter(listing_id=listing_id).aggregate(at=Max("observed_at"))
    return newest["at"]


def load_points(listing_ids: Iterable[int], since: dt.datetime) -> dict[int, list[Point]]:
    """Every listing's observations since `since`, in one query, oldest first."""
    points: dict[int, list[Point]] = defaultdict(list)
    for listing_id, observed_at, price, shipping, in_stock in point_rows(listing_ids, since):
        points[listing_id].append(Point(observed_at, effective_price(price, shipping), in_stock))
    return points


def listing_stats(ordered: Sequence[Point], now: dt.datetime) -> tuple[int | None, int | None]:
    """(typical price, 90-day low) as the listing stores them, from its points in time order:
    the one rule for `Listing.typical_price` and `Listing.low_90`."""
    typical, low_90 = summary(ordered, now)
    return (round(typical) if typical is not None else None), low_90


def refresh_stats(listing_ids: Iterable[int], now: dt.datetime | None = None) -> int:
    """Recompute each listing's typical price and 90-day low from its history."""
    now = now or timezone.now()
    ids = list(listing_ids)
    points = load_points(ids, now - LOW_WINDOW)
    updated = update_by_id(
        Listing,
        ("typical_price", "low_90", "stats_at"),
        ((pk, (*listing_stats(points.get(pk, ()), now), now)) for pk in ids),
    )
    # Their pages show both (and the home page sorts by them).
    transaction.on_commit(lambda: pagecache.listings_changed(ids))
    return updated
