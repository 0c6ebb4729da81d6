"""One rule for what a marketplace's answer leaves behind: a poll and the dispatcher's re-fetch
of the same answers leave the same price history and the same listing state.

Two listings with the same history are asked the same questions of the fake Ichiba API, one
by price polling, the other by a dispatch cycle (an outbox row for it makes the dispatcher
re-fetch it); after every step their points and listings must match — and match what the rule
says."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from outbox.dispatch import run_cycle
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, with_history
from tests.fakes.ichiba import ichiba_item
from tests.outbox_helpers import enqueue_for
from watches.models import Listing, PricePoint
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
POLLED, REFETCHED = "shop:polled", "shop:refetched"
LISTING_STATE = (
    "price",
    "shipping",
    "in_stock",
    "points",
    "points_until",
    "points_after",
    "point_rate",
    "member_points",
    "typical_price",
    "low_90",
    "typical_net",
    "low_90_net",
    "last_polled_at",
    "last_error",
    "last_error_at",
)

# (minutes after NOW, what the marketplace answers, whether the rule writes a point)
STEPS = [
    (0, {"price": 1000}, True),  # the last point is a day old: written however unchanged
    (10, {"price": 1000}, False),  # unchanged, last point 10 min old: skipped
    (20, {"price": 880}, True),  # a new price: written; the 90-day low follows it
    (30, {"available": False, "price": 880}, True),  # sold out (availability 0): written
    (40, "empty", False),  # no offer at all: out of stock at 880, as already recorded
    (50, "server", False),  # an error: no point, the error is kept on the listing
    (60, "empty", False),  # the error is cleared by an observation, still no new point
    (260, "empty", True),  # unchanged but the last point is over 180 min old: written
    (270, {"price": 950}, True),  # back in stock
    (280, "not_found", False),  # gone from the marketplace: an error again
]


@pytest.fixture
def listings(ichiba, settings):
    settings.POLL_HISTORY_MIN_MINUTES = 180
    history = [1000] * 20 + [None] * 3 + [1100] * 20 + [1000] * 5
    return [_listing(code, history) for code in (POLLED, REFETCHED)]


def _answer(ichiba, code: str, answer) -> None:
    ichiba.behave.pop(code, None)
    if isinstance(answer, str):
        ichiba.behave[code] = answer
    else:
        ichiba.items[code] = ichiba_item(code, **answer)


def _points(listing: Listing, since: dt.datetime) -> list[tuple]:
    return list(
        PricePoint.objects.filter(listing=listing, observed_at__gte=since)
        .order_by("observed_at")
        .values_list("observed_at", "price", "shipping", "in_stock")
    )


def _state(listing: Listing) -> tuple:
    """The listing's state, its own item code in an error message written as <code>."""
    listing.refresh_from_db()
    listing.last_error = listing.last_error.replace(listing.item_code, "<code>")
    return tuple(getattr(listing, name) for name in LISTING_STATE)


def test_a_poll_and_a_refetch_leave_the_same_history_and_listing_state(ichiba, listings):
    polled, refetched = listings
    device = DeviceFactory()
    written = 0
    with time_machine.travel(NOW, tick=False) as clock:
        for minutes, answer, writes_a_point in STEPS:
            clock.move_to(NOW + dt.timedelta(minutes=minutes))
            for code in (POLLED, REFETCHED):
                _answer(ichiba, code, answer)
            # A row due for the re-fetched listing: the dispatcher asks the marketplace.
            watch = WatchFactory(device=device, listing=refetched, target_price=5000)
            enqueue_for(watch)

            asked = ichiba.asked(REFETCHED)
            assert poll(codes=[POLLED]).listings == 1
            run_cycle()
            assert ichiba.asked(REFETCHED) == asked + 1, "one re-fetch per cycle"

            step = f"step at +{minutes} min ({answer})"
            written += writes_a_point
            assert len(_points(polled, NOW)) == written, step
            assert [p[1:] for p in _points(polled, NOW)] == [
                p[1:] for p in _points(refetched, NOW)
            ], step
            assert _state(polled) == _state(refetched), step

    polled_state = dict(zip(LISTING_STATE, _state(polled), strict=True))
    assert polled_state["last_error"].startswith("not_found")
    assert polled_state["price"] == 950 and polled_state["in_stock"] is True
    assert polled_state["low_90"] == 880, "the sale at ¥880 is the 90-day low"
    assert polled_state["typical_price"] == 1100


def test_empty_is_an_out_of_stock_point_at_the_last_known_price(ichiba, listings):
    polled, refetched = listings
    with time_machine.travel(NOW, tick=False):
        for code in (POLLED, REFETCHED):
            _answer(ichiba, code, "empty")
        enqueue_for(WatchFactory(listing=refetched, target_price=5000))

        poll(codes=[POLLED])
        run_cycle()

        for listing in (polled, refetched):
            assert _points(listing, NOW) == [(timezone.now(), 1000, 0, False)]
            listing.refresh_from_db()
            assert (listing.in_stock, listing.price, listing.last_error) == (False, 1000, "")


def test_a_refetch_keeps_a_90_day_low_older_than_30_days_as_a_poll_does(ichiba, settings):
    """A re-fetch that computes the statistics (they are over an hour old) reads 30 days of
    points and asks the database for the older part of the 90-day low; a poll reads all 90.
    A low 40 days old and a price that held from before the 30-day window must come out the
    same both ways."""
    settings.POLL_HISTORY_MIN_MINUTES = 180
    # 60 days ago ¥700 for 10 days (the 90-day low), then ¥1,200 until 25 days ago, then
    # ¥1,000: the typical price weighs the ¥1,200 that still held when the 30-day window began.
    history = [700] * 10 + [1200] * 25 + [None] * 2 + [1000] * 23
    polled, refetched = (_listing(code, history) for code in (POLLED, REFETCHED))
    # Statistics computed over an hour ago: the re-fetch computes them from the history.
    Listing.objects.filter(pk=refetched.pk).update(stats_at=NOW - dt.timedelta(hours=2))
    with time_machine.travel(NOW, tick=False):
        for code in (POLLED, REFETCHED):
            _answer(ichiba, code, {"price": 1000})
        enqueue_for(WatchFactory(listing=refetched, target_price=5000))
        poll(codes=[POLLED])
        run_cycle()
    assert _state(polled) == _state(refetched)
    polled_state = dict(zip(LISTING_STATE, _state(polled), strict=True))
    assert polled_state["low_90"] == 700
    assert polled_state["typical_price"] == 1000
    assert _points(polled, NOW) == _points(refetched, NOW) == [(NOW, 1000, 0, True)]


def _listing(code: str, history: Sequence[int | None]) -> Listing:
    """A Rakuten listing at ¥1,000 with `history` (a point a day) and its statistics, last
    polled an hour before NOW: no observation is fresh enough to spare the dispatcher its
    request."""
    listing = ListingFactory.create(
        source="rakuten",
        item_code=code,
        price=1000,
        shipping=0,
        last_polled_at=NOW - dt.timedelta(hours=1),
    )
    return with_history(listing, history, now=NOW)


def _refetched_listing(stats_age: dt.timedelta) -> Listing:
    """A listing whose history says typical ¥1,000 and 90-day low ¥900, but whose stored
    statistics (¥1,234 and ¥950, computed `stats_age` before NOW) say otherwise: which of the
    two a re-fetch leaves shows whether it read the history."""
    listing = _listing(REFETCHED, [900] + [1000] * 29)
    Listing.objects.filter(pk=listing.pk).update(
        typical_price=1234, low_90=950, stats_at=NOW - stats_age
    )
    return listing


@pytest.mark.parametrize(
    ("answer", "low_90"),
    [(700, 700), (1100, 950)],
    ids=["a new low is taken", "a higher price leaves the low"],
)
def test_a_refetch_within_the_hour_of_the_statistics_folds_its_answer_into_them(
    ichiba, settings, answer, low_90
):
    """The poll that detected a crossing computed the statistics minutes before the
    dispatcher's re-fetch: the answer is folded in (the 90-day low takes a lower price; the
    typical price, which weighs each price by how long it held, is as it was) and the history
    is not read again."""
    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=50))
    with time_machine.travel(NOW, tick=False):
        _answer(ichiba, REFETCHED, {"price": answer})
        enqueue_for(WatchFactory(listing=listing, target_price=5000))
        run_cycle()
    listing.refresh_from_db()
    assert (listing.price, listing.last_polled_at) == (answer, NOW)
    assert listing.typical_price == 1234, "stored, not recomputed from the history"
    assert listing.low_90 == low_90
    assert listing.stats_at == NOW - dt.timedelta(minutes=50), "still when they were computed"
    assert _points(listing, NOW) == [(NOW, answer, 0, True)], "the rule's point as ever"


def test_a_refetch_after_the_hour_computes_the_statistics_from_the_history(ichiba, settings):
    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=61))
    with time_machine.travel(NOW, tick=False):
        _answer(ichiba, REFETCHED, {"price": 1100})
        enqueue_for(WatchFactory(listing=listing, target_price=5000))
        run_cycle()
    listing.refresh_from_db()
    assert (listing.typical_price, listing.low_90, listing.stats_at) == (1000, 900, NOW)


def test_a_poll_always_computes_the_statistics_from_the_history(ichiba, settings):
    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=5))
    with time_machine.travel(NOW, tick=False):
        _answer(ichiba, REFETCHED, {"price": 1100})
        assert poll(codes=[REFETCHED]).listings == 1
    listing.refresh_from_db()
    assert (listing.typical_price, listing.low_90, listing.stats_at) == (1000, 900, NOW)


def test_a_folding_refetch_compares_with_the_point_before_its_answer_not_a_later_one(
    ichiba, settings
):
    """Another process may write a point after this answer was made and before it is kept:
    "unchanged" is judged against the latest point before the answer, as for any re-fetch."""
    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=10))
    PricePoint.objects.create(
        listing=listing,
        observed_at=NOW - dt.timedelta(minutes=10),
        price=1000,
        shipping=0,
        in_stock=True,
    )
    later = PricePoint.objects.create(
        listing=listing,
        observed_at=NOW + dt.timedelta(minutes=5),
        price=1100,
        shipping=0,
        in_stock=True,
    )
    with time_machine.travel(NOW, tick=False):
        _answer(ichiba, REFETCHED, {"price": 1000})
        enqueue_for(WatchFactory(listing=listing, target_price=5000))
        run_cycle()
    assert _points(listing, NOW - dt.timedelta(minutes=10)) == [
        (NOW - dt.timedelta(minutes=10), 1000, 0, True),
        (later.observed_at, 1100, 0, True),
    ], "unchanged since the point 10 minutes before: no new point"


@pytest.mark.parametrize(
    ("stats_age", "judging"),
    [(10, False), (120, False), (120, True)],
    ids=["a folding re-fetch", "a computing re-fetch", "a poll"],
)
def test_an_answer_judges_unchanged_on_the_history_as_it_is_when_kept(settings, stats_age, judging):
    """Another process may keep a point stamped before this answer after the answer was made
    (and its history read) and before it is kept: "unchanged" compares with that point
    (¥1,100), not with the one the history ended with when the answer came (¥1,000) — the
    answer's ¥1,000 is a change. Whether the re-fetch folds or computes, or a poll asked."""
    from watches.marketplaces.base import Observation
    from watches.polling.observations import observe

    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=stats_age))
    listing.refresh_from_db()  # as the dispatcher loads it
    earlier = NOW - dt.timedelta(minutes=10)
    PricePoint.objects.create(
        listing=listing, observed_at=earlier, price=1000, shipping=0, in_stock=True
    )
    answer = Observation(
        item_code=REFETCHED, price=1000, shipping=0, in_stock=True, observed_at=NOW
    )
    batch = observe([(listing, answer)], NOW, judging=judging)
    assert (listing.pk in batch.folded) == (stats_age < 60)
    polled = NOW - dt.timedelta(minutes=1)
    PricePoint.objects.create(
        listing=listing, observed_at=polled, price=1100, shipping=0, in_stock=True
    )
    batch.save()
    assert _points(listing, earlier) == [
        (earlier, 1000, 0, True),
        (polled, 1100, 0, True),
        (NOW, 1000, 0, True),
    ]


@pytest.mark.parametrize("stats_age", [10, 120], ids=["folded", "computed"])
@pytest.mark.parametrize("answered", ["observation", "error"])
def test_an_answer_kept_after_a_later_one_leaves_the_later_state_and_adds_its_point(
    settings, stats_age, answered
):
    """A re-fetch asks at NOW; a poll asks five seconds later and saves first (¥1,200). The
    re-fetch's ¥900 — or its error — then saved must not become the listing's state: the next
    dispatcher would take that older price as fresh. Its point still joins the history, in
    its place."""
    from watches.marketplaces.base import FetchError, FetchKind, Observation
    from watches.polling.observations import observe

    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=stats_age))
    listing.refresh_from_db()
    answer = (
        Observation(item_code=REFETCHED, price=900, shipping=0, in_stock=True, observed_at=NOW)
        if answered == "observation"
        else FetchError(FetchKind.SERVER, "503")
    )
    batch = observe([(listing, answer)], NOW, judging=False)
    later = NOW + dt.timedelta(seconds=5)
    PricePoint.objects.create(
        listing=listing, observed_at=later, price=1200, shipping=0, in_stock=True
    )
    Listing.objects.filter(pk=listing.pk).update(
        price=1200, shipping=0, in_stock=True, last_polled_at=later, last_error=""
    )

    batch.save()

    kept = Listing.objects.get(pk=listing.pk)
    assert (kept.price, kept.last_polled_at, kept.last_error) == (1200, later, "")
    points = _points(listing, NOW - dt.timedelta(minutes=1))
    if answered == "observation":
        assert points == [(NOW, 900, 0, True), (later, 1200, 0, True)]
    else:
        assert points == [(later, 1200, 0, True)]


@pytest.mark.parametrize("answer", [1000, 1100], ids=["the later point's", "the earlier one's"])
def test_of_two_points_at_one_moment_the_later_written_is_what_unchanged_compares_with(
    ichiba, settings, answer
):
    """Two processes may write points stamped alike; the one written last (the higher id) is
    the listing's latest, on either database's way of reading it."""
    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=10))
    moment = NOW - dt.timedelta(minutes=10)
    for price in (1100, 1000):
        PricePoint.objects.create(
            listing=listing, observed_at=moment, price=price, shipping=0, in_stock=True
        )
    with time_machine.travel(NOW, tick=False):
        _answer(ichiba, REFETCHED, {"price": answer})
        enqueue_for(WatchFactory(listing=listing, target_price=5000))
        run_cycle()
    written = [point[1] for point in _points(listing, NOW)]
    assert written == ([] if answer == 1000 else [1100])


def test_a_fold_keeps_statistics_another_process_wrote_while_the_marketplace_was_asked(
    settings,
):
    """The dispatcher loads its listings, then asks the marketplace; a poll may compute the
    statistics (here a new ¥700 low) in between. Saving the fold must fold into those, not
    write back what was loaded."""
    from watches.marketplaces.base import Observation
    from watches.polling.observations import observe

    settings.POLL_HISTORY_MIN_MINUTES = 180
    listing = _refetched_listing(dt.timedelta(minutes=10))  # loaded: typical 1234, low 950
    polled_at = NOW - dt.timedelta(minutes=1)
    # The poll, meanwhile: statistics computed from the history with its ¥700 answer.
    Listing.objects.filter(pk=listing.pk).update(typical_price=1000, low_90=700, stats_at=polled_at)
    answer = Observation(item_code=REFETCHED, price=800, shipping=0, in_stock=True, observed_at=NOW)
    batch = observe([(listing, answer)], NOW, judging=False)
    assert batch.folded == {listing.pk: (800, 800)}, "incl. shipping, and after points (none)"
    batch.save()

    listing.refresh_from_db()
    assert (listing.typical_price, listing.low_90, listing.stats_at) == (1000, 700, polled_at)
    assert listing.price == 800


# --- where an observation is written -------------------------------------------------------

# Every column of a listing that an answer writes (`watches.polling.observations`): its last-seen
# state, its statistics, an error.
WRITTEN = (*LISTING_STATE, "stats_at")


def test_no_index_of_the_listing_table_covers_a_column_an_observation_writes():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Listing._meta.db_table)
    columns = {Listing._meta.get_field(name).column for name in WRITTEN}
    indexed = {
        name: set(info["columns"]) & columns
        for name, info in constraints.items()
        if info["index"] or info["unique"] or info["primary_key"]
    }
    assert indexed, "the table's indexes were read"
    assert {name: hit for name, hit in indexed.items() if hit} == {}


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="heap-only tuples and fill factors are PostgreSQL's"
)
def test_an_observation_rewrites_its_listing_in_place_on_postgresql():
    from demo.models import DemoProduct
    from watches.services import refetch

    listings = ListingFactory.create_batch(3, price=1200)
    DemoProduct.objects.filter(item_code__in=[x.item_code for x in listings]).update(price=990)
    table = Listing._meta.db_table
    counts = (
        "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
        "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        assert "fillfactor=80" in cursor.fetchone()[0]
        # This transaction's own counts (the test runs inside one), before and after.
        cursor.execute(counts, [table, table])
        updated_before, in_place_before = cursor.fetchone()
        refetch(listings, timezone.now())
        cursor.execute(counts, [table, table])
        updated, in_place = cursor.fetchone()
    updated, in_place = updated - updated_before, in_place - in_place_before
    assert Listing.objects.filter(price=990).count() == 3, "the new price was kept"
    assert updated >= 3 and in_place == updated
