"""Reading listings' price history in bulk, and the summary the pages sort by."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from django.db import connection, transaction
from django.db.models import F, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from common.bulk import update_by_id
from common.lookups import one_of
from watches import pagecache
from watches.models import Listing, PricePoint, effective_price
from watches.triggers import LOW_WINDOW, Point, summary

PointRow = tuple[int, dt.datetime, int | None, int | None, bool]


def point_rows(listing_ids: Iterable[int], since: dt.datetime) -> Iterator[PointRow]:
    """(listing id, observed_at, price, shipping, in_stock) of every point of these listings
    observed since `since`, by listing then time, in one query (`rows_of`)."""
    ids = list(listing_ids)
    if not ids:
        return
    points = PricePoint.objects.filter(one_of("listing_id", ids), observed_at__gte=since)
    yield from rows_of(points.order_by("listing_id", "observed_at", "id"))


def rows_of(points: QuerySet[PricePoint]) -> Iterator[PointRow]:
    """The `PointRow` of each of `points`, in their order.

    Read through the cursor rather than the ORM: on 90 days of history, Django's converter
    for each datetime value costs more than the query itself. SQLite stores a datetime as UTC
    text: it is read as text and parsed here (its backend's converter, and making the result
    aware, would cost three times as much); PostgreSQL's driver gives aware datetimes."""
    as_text = connection.vendor == "sqlite"
    observed_at = Cast("observed_at", TextField()) if as_text else F("observed_at")
    query = points.values_list("listing_id", observed_at, "price", "shipping", "in_stock")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while rows := cursor.fetchmany(5000):
            yield from from_text(rows) if as_text else rows


def from_text(rows: Iterable[Sequence]) -> Iterator[PointRow]:
    """Each `PointRow` of `rows` read from SQLite with the time as the UTC text it keeps (one
    loop over a chunk: a call per row would cost the history read half as much again)."""
    parse = dt.datetime.fromisoformat
    for listing_id, at, price, shipping, in_stock in rows:
        yield listing_id, parse(at + "+00:00"), price, shipping, bool(in_stock)


def newest_point_at(listing_id: int) -> object:
    """When the listing's newest point was observed (None without one), as the database
    gives it: what its chart is drawn from changes with it, as points are only ever added at
    the time of an observation. One step down the (listing, observed_at) index."""
    table = PricePoint._meta.db_table
    with connection.cursor() as cursor:
        # Written out: the ORM would spend longer building this query than the database
        # answering it.
        cursor.execute(
            f"SELECT MAX(observed_at) FROM {table} WHERE listing_id = %s",  # noqa: S608
            [listing_id],
        )
        return cursor.fetchone()[0]


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
