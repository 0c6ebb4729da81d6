"""Each listing's latest price point, kept on its row by the database's triggers
(`watches.latest_point`), whoever writes the history: on SQLite here, on PostgreSQL in CI."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.db import connection

from tests.factories import ListingFactory
from watches import latest_point
from watches.models import Listing, PricePoint
from watches.observations import _latest_before, _latest_kept

pytestmark = pytest.mark.django_db
T0 = dt.datetime(2026, 11, 1, 3, 0, tzinfo=dt.UTC)
FAR = dt.datetime(9999, 1, 1, tzinfo=dt.UTC)


def kept(listing: Listing) -> tuple:
    listing.refresh_from_db()
    return listing.point_at, listing.point_price, listing.point_shipping, listing.point_in_stock


def point(listing: Listing, minutes: int, price: int | None, **fields) -> PricePoint:
    return PricePoint.objects.create(
        listing=listing,
        observed_at=T0 + dt.timedelta(minutes=minutes),
        price=price,
        shipping=fields.get("shipping"),
        in_stock=fields.get("in_stock", True),
    )


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_a_later_point_is_kept_an_earlier_one_is_not_a_tie_goes_to_the_later_insert():
    listing = ListingFactory()
    assert kept(listing) == (None, None, None, None)
    point(listing, 10, 1000, shipping=200)
    assert kept(listing) == (at(10), 1000, 200, True)
    point(listing, 5, 900)  # an older answer saved after: history, not the latest
    assert kept(listing) == (at(10), 1000, 200, True)
    point(listing, 10, 950, in_stock=False)  # same moment, inserted later: the seek's pick
    assert kept(listing) == (at(10), 950, None, False)


def test_one_statement_of_many_points_keeps_each_listings_latest():
    first, second = ListingFactory(), ListingFactory()
    PricePoint.objects.bulk_create(
        [
            PricePoint(listing=first, observed_at=at(3), price=300, in_stock=True),
            PricePoint(listing=first, observed_at=at(7), price=700, in_stock=True),
            PricePoint(listing=first, observed_at=at(5), price=500, in_stock=True),
            PricePoint(listing=second, observed_at=at(1), price=100, in_stock=False),
        ]
    )
    assert kept(first) == (at(7), 700, None, True)
    assert kept(second) == (at(1), 100, None, False)


def test_deleting_the_latest_point_keeps_the_one_before_and_none_left_is_null():
    listing = ListingFactory()
    old, middle, latest = point(listing, 1, 100), point(listing, 2, 200), point(listing, 3, 300)
    old.delete()  # retention: an old point goes, the latest stays
    assert kept(listing) == (at(3), 300, None, True)
    latest.delete()
    assert kept(listing) == (at(2), 200, None, True)
    middle.delete()
    assert kept(listing) == (None, None, None, None)


def test_a_point_edited_in_place_is_derived_again():
    listing, other = ListingFactory(), ListingFactory()
    point(listing, 1, 100)
    latest = point(listing, 2, 200)
    latest.price = 250
    latest.save()
    assert kept(listing) == (at(2), 250, None, True)
    latest.observed_at = at(0)  # moved back behind the other
    latest.save()
    assert kept(listing) == (at(1), 100, None, True)
    latest.listing = other
    latest.save()
    assert kept(other) == (at(0), 250, None, True)
    assert kept(listing) == (at(1), 100, None, True)


def test_the_kept_point_is_what_the_history_index_seek_finds_whatever_the_writes():
    rng = random.Random(7)
    listings = [ListingFactory() for _ in range(6)]
    points: list[PricePoint] = []
    for _ in range(300):
        action = rng.random()
        if action < 0.55 or not points:
            points.append(point(rng.choice(listings), rng.randrange(50), rng.randrange(1, 9) * 100))
        elif action < 0.65:
            batch = [
                PricePoint(
                    listing=rng.choice(listings),
                    observed_at=at(rng.randrange(50)),
                    price=rng.randrange(1, 9) * 100,
                    in_stock=rng.random() < 0.8,
                )
                for _ in range(rng.randrange(1, 6))
            ]
            points.extend(PricePoint.objects.bulk_create(batch))
        elif action < 0.85:
            points.pop(rng.randrange(len(points))).delete()
        else:
            PricePoint.objects.filter(observed_at__lt=at(rng.randrange(50))).delete()
            points = list(PricePoint.objects.all())
    ids = [listing.pk for listing in listings]
    assert _latest_kept(ids) == _latest_before(ids, FAR)


def test_install_is_idempotent_and_repairs_what_a_missing_trigger_let_by():
    assert latest_point.install(connection) is False, "the migration installed them"
    listing = ListingFactory()
    point(listing, 1, 100)
    latest_point.uninstall(connection)  # as a table rebuild on SQLite would
    try:
        point(listing, 2, 200)
        assert kept(listing) == (at(1), 100, None, True)
    finally:
        assert latest_point.install(connection) is True
    assert kept(listing) == (at(2), 200, None, True)
    point(listing, 3, 300)
    assert kept(listing) == (at(3), 300, None, True)
