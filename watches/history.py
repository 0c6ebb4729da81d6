"""Reading a listing's price history in bulk, and the summary the pages sort by."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from django.db import connection
from django.utils import timezone

from watches.models import Listing, PricePoint, effective_price
from watches.triggers import LOW_WINDOW, History, Point, build_history


def load_points(listing_ids: Iterable[int], since: dt.datetime) -> dict[int, list[Point]]:
    """Every listing's observations since `since`, in one query, oldest first."""
    points: dict[int, list[Point]] = defaultdict(list)
    rows = (
        PricePoint.objects.filter(listing_id__in=list(listing_ids), observed_at__gte=since)
        .order_by("listing_id", "observed_at")
        .values_list("listing_id", "observed_at", "price", "shipping", "in_stock")
    )
    for listing_id, observed_at, price, shipping, in_stock in rows.iterator(chunk_size=5000):
        points[listing_id].append(Point(observed_at, effective_price(price, shipping), in_stock))
    return points


def histories(listing_ids: Iterable[int], now: dt.datetime | None = None) -> dict[int, History]:
    now = now or timezone.now()
    ids = list(listing_ids)
    points = load_points(ids, now - LOW_WINDOW)
    return {listing_id: build_history(points.get(listing_id, ()), now) for listing_id in ids}


def stats(history: History) -> tuple[int | None, int | None]:
    """(typical price, 90-day low) as the listing stores them."""
    typical = round(history.typical) if history.typical is not None else None
    return typical, history.low_90


def refresh_stats(listing_ids: Iterable[int], now: dt.datetime | None = None) -> int:
    """Recompute each listing's typical price and 90-day low from its history."""
    summary = histories(listing_ids, now)
    params = [(*stats(history), listing_id) for listing_id, history in summary.items()]
    table = connection.ops.quote_name(Listing._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET typical_price = %s, low_90 = %s WHERE id = %s",  # noqa: S608
            params,
        )
    return len(params)
