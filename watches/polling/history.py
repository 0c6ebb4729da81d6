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
from watches.models import Listing, PricePoint, effective_price, net_price
from watches.pages import pagecache
from watches.triggers import LOW_WINDOW, Point, summary

# (listing id, observed_at, price, shipping, in_stock, points: None before points were read)
PointRow = tuple[int, dt.datetime, int | None, int | None, bool, int | None]
POINT_COLUMNS = ("listing_id", "observed_at", "price", "shipping", "in_stock", "points")


def point_rows(listing_ids: Iterable[int], since: dt.datetime) -> Iterator[PointRow]:
    """(listing id, observed_at, price, shipping, in_stock, points) of every point of these
    listings observed since `since`, by listing then time, in one query."""
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


def load_points(
    listing_ids: Iterable[int], since: dt.datetime, *, after_points: bool = False
) -> dict[int, list[Point]]:
    """Every listing's observations since `since`, in one query, oldest first: each at its
    price incl. shipping, or `after_points` at its price after points (`net_price`)."""
    points: dict[int, list[Point]] = defaultdict(list)
    for row in point_rows(listing_ids, since):
        points[row[0]].append(as_point(row, after_points=after_points))
    return points


def load_both(
    listing_ids: Iterable[int], since: dt.datetime
) -> tuple[dict[int, list[Point]], dict[int, list[Point]]]:
    """`load_points` both ways (incl. shipping; after points) from one query."""
    totals: dict[int, list[Point]] = defaultdict(list)
    nets: dict[int, list[Point]] = defaultdict(list)
    for row in point_rows(listing_ids, since):
        totals[row[0]].append(as_point(row))
        nets[row[0]].append(as_point(row, after_points=True))
    return totals, nets


def as_point(row: PointRow, *, after_points: bool = False) -> Point:
    """A history row as triggers and charts see it: its price incl. shipping, or after
    points."""
    _, observed_at, price, shipping, in_stock, points = row
    value = net_price(price, shipping, points) if after_points else effective_price(price, shipping)
    return Point(observed_at, value, in_stock)


def listing_stats(ordered: Sequence[Point], now: dt.datetime) -> tuple[int | None, int | None]:
    """(typical price, 90-day low) as the listing stores them, from its points in time order:
    the one rule for `Listing.typical_price` and `Listing.low_90`."""
    typical, low_90 = summary(ordered, now)
    return (round(typical) if typical is not None else None), low_90


def refresh_stats(listing_ids: Iterable[int], now: dt.datetime | None = None) -> int:
    """Recompute each listing's typical price and 90-day low from its history, incl.
    shipping and after points."""
    now = now or timezone.now()
    ids = list(listing_ids)
    totals, nets = load_both(ids, now - LOW_WINDOW)
    updated = update_by_id(
        Listing,
        ("typical_price", "low_90", "typical_net", "low_90_net", "stats_at"),
        (
            (
                pk,
                (
                    *listing_stats(totals.get(pk, ()), now),
                    *listing_stats(nets.get(pk, ()), now),
                    now,
                ),
            )
            for pk in ids
        ),
    )
    # Their pages show both (and the home page sorts by them).
    transaction.on_commit(lambda: pagecache.listings_changed(ids))
    return updated
