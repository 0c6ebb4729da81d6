"""A shop's page 1 is its whole catalogue only when the answer says so and holds items; and
the quarter of a run given to the listings known longest ago is asked even when the run is
cut short."""

from __future__ import annotations

import datetime as dt
import types
import zoneinfo

import pytest

from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.clock import FakeClock
from tests.fakes.ichiba import APP_ID
from watches.marketplaces.base import Ask, Observation, Page, Shape
from watches.marketplaces.ratelimit import RateLimiter, forget_limiter, install_limiter
from watches.models import Listing, ShopFeed, Trigger
from watches.polling import feeds
from watches.polling import poll as poll_module
from watches.polling.plan import Reach, plan
from watches.polling.poll import due_listings, poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
EVERYTHING = frozenset({Shape.ITEM, Shape.SHOP, Shape.PRODUCT})


def reach(budget: int | None) -> dict[str, Reach]:
    return {"rakuten": Reach(budget, EVERYTHING, 30, lambda code: code.partition(":")[0])}


def listing(code: str, *, price: int = 1000, target: int | None = None, **fields) -> Listing:
    fields.setdefault("last_polled_at", T0 - dt.timedelta(hours=1))
    made = ListingFactory.create(
        source="rakuten", item_code=code, price=price, shipping=0, units_per_pack=None, **fields
    )
    if target is not None:
        WatchFactory(
            listing=made, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=target
        )
    return made


def page(codes: list[str], at: dt.datetime, total: int | None = None, shop: str = "s") -> Page:
    items = tuple(Observation(code, 100, True, at, extra={"shop": shop}) for code in codes)
    return Page(Ask(Shape.SHOP, shop), items, at, total=total)


def shapes_of(chosen):
    return [
        (item.shape, item.listing_id if item.shape == Shape.ITEM else item.key) for item in chosen
    ]


# A short or empty page 1 taken for the shop's whole catalogue.


def test_a_short_page_whose_total_says_more_is_not_the_whole_catalogue():
    """Page 1 holds 5 items but the answer's `count` says the shop has 100: the other 95
    are not on it, so the read did not show every change (nothing of the last read's order
    is on it either). The feed must not vouch for a listing it did not show."""
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(5)], first, total=5), 30)
    assert feed.complete_since == first

    feeds._learn_from(feed, page([f"s:new{n}" for n in range(5)], T0, total=100), 30)

    assert feed.complete_since == T0, "a page that holds 5 of 100 items reached back nowhere"
    assert not feed.shows_unchanged(first + dt.timedelta(minutes=1))


def test_an_empty_page_does_not_vouch_for_the_shops_listings(time_machine, ichiba):
    """A shop with two watched listings closes (or its feed answers `count: 0`): page 1
    comes back empty, taken for the whole catalogue, the read "complete" and the shop's pace
    learned as nought. The plan then takes both listings for unchanged and in stock run
    after run — the shop's empty page "answers" them, also in the oldest quarter — and never
    asks either on its own (its own request would answer `empty`: out of stock)."""
    for code in ("s:a", "s:b"):
        ichiba.add(code, price=1000)
    time_machine.move_to(T0 - dt.timedelta(hours=2), tick=False)
    a = listing("s:a", target=950, last_polled_at=None)
    b = listing("s:b", target=950, last_polled_at=None)
    feeds.poll_shops("rakuten", ["s"])  # both shown: the chain begins
    a.refresh_from_db()
    assert a.last_polled_at == T0 - dt.timedelta(hours=2)

    for code in ("s:a", "s:b"):  # the shop closes
        del ichiba.items[code]
    for minutes in (60, 30):
        time_machine.move_to(T0 - dt.timedelta(minutes=minutes), tick=False)
        feeds.poll_shops("rakuten", ["s"])  # count 0, no items

    time_machine.move_to(T0, tick=False)
    chosen = shapes_of(plan(due_listings(T0), T0, reaches=reach(10)))

    assert (Shape.ITEM, a.pk) in chosen and (Shape.ITEM, b.pk) in chosen, chosen


# The oldest quarter asked last, and cut first.


@pytest.fixture
def rakuten(ichiba, settings):
    fake = FakeClock()
    install_limiter(
        f"rakuten:{APP_ID}",
        settings.RAKUTEN_RATE_PER_SECOND,
        RateLimiter(1.0, clock=fake, sleep=fake.sleep),
    )
    yield ichiba
    forget_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND)


def test_a_run_cut_short_still_asks_the_listing_checked_longest_ago(
    time_machine, rakuten, settings, monkeypatch
):
    """Budget 4 a run (a quarter: 1 for the listing checked longest ago). The dispatcher's
    re-checks take the limiter's slots, so every run's time runs out after 3 of its 4
    requests. The quarter's pick, far from its line, is asked last (sorted by score) and is
    what each run leaves out; next run it is still the oldest, picked again, put last again:
    it is never asked, however many runs go by."""
    settings.POLL_SHAPES = ["item"]
    settings.POLL_MAX_SECONDS = 16
    settings.POLL_REFETCH_SHARE = 0.75  # 4 requests a run at 1/s
    settings.POLL_BATCH_SIZE = 1
    hour_ago = T0 - dt.timedelta(hours=1)
    rakuten.add("shop:far", price=1000)
    far = ListingFactory.create(
        source="rakuten",
        item_code="shop:far",
        price=1000,
        shipping=0,
        in_stock=True,
        units_per_pack=None,
        last_polled_at=hour_ago,
    )
    WatchFactory(
        listing=far, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=300
    )
    for n in range(8):
        rakuten.add(f"shop:close-{n}", price=1000)
        close = ListingFactory.create(
            source="rakuten",
            item_code=f"shop:close-{n}",
            price=1000,
            shipping=0,
            in_stock=True,
            units_per_pack=None,
            last_polled_at=hour_ago,
        )
        WatchFactory(
            listing=close, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=990
        )

    # Each batch takes a "second"; a run may take 2.5 of them: 3 of its 4 requests.
    ticks = iter(range(10_000))
    monkeypatch.setattr(poll_module, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))

    for run in range(6):
        time_machine.move_to(T0 + dt.timedelta(minutes=15 * run), tick=False)
        poll(max_seconds=2.5)

    asked = [query["itemCode"] for query in rakuten.requests]
    assert len(asked) >= 18  # at least the 3 a run its time allows
    assert "shop:far" in asked, "checked longest ago, and never asked in six runs"
