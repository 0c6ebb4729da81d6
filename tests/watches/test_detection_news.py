"""What is news again to a watch already told, or whose settings changed: a 90-day low
once the low told has left the window; a premium member's own price, not everyone's, for
whether it went back above the line; a restock judged from when the watch began to watch
for it, not from when it was made."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from decimal import Decimal

import pytest

from demo.market import set_product
from tests.factories import ListingFactory, WatchFactory
from watches.marketplaces.base import Observation
from watches.models import Listing, PricePoint, Trigger, Watch
from watches.pages.watchlist import WatchParams
from watches.polling.poll import poll
from watches.triggers import Point, build_history, detect

NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")


def obs(price: int, shipping: int | None = 0, in_stock: bool = True, **fields) -> Observation:
    return Observation(
        item_code="x", price=price, shipping=shipping, in_stock=in_stock, observed_at=NOW, **fields
    )


def told(trigger: str, price: int, at: dt.datetime, **fields) -> Watch:
    """A watch made long ago, told `price` at `at`."""
    return Watch(
        trigger=trigger,
        created_at=NOW - 200 * DAY,
        last_notified_at=at,
        last_notified_price=Decimal(price),
        last_notified_detected_at=at,
        **fields,
    )


# --- lowest: a new low once the low told has left the 90-day window ----------------------


def test_lowest_fires_for_a_new_90_day_low_once_the_told_low_left_the_window():
    """Told "lowest in 90 days" at ¥880, then a flat ¥1,000 for 100 days: ¥950 is a new
    90-day low, above the ¥880 told but news, since ¥880 has left the window."""
    w = told(Trigger.LOWEST, 880, NOW - 110 * DAY)
    # One point a day at ¥1,000 since the sale ended (history is read 90 days back).
    points = [Point(NOW - d * DAY, 1000, True) for d in range(89, 0, -1)]
    history = build_history(points, NOW)
    assert history.low_90 == 1000  # ¥880 is long out of the window
    judgement = detect(w, None, obs(950), history)
    assert judgement.holds, judgement.reason


def test_a_flat_price_is_no_new_low_once_the_told_low_left_the_window():
    """Told ¥880, then ¥1,000 for 90 days: ¥1,000 again is at the 90-day low, but no price
    of the window is above it: nothing new to tell."""
    w = told(Trigger.LOWEST, 880, NOW - 110 * DAY)
    points = [Point(NOW - d * DAY, 1000, True) for d in range(89, 0, -1)]
    judgement = detect(w, None, obs(1000), build_history(points, NOW))
    assert not judgement.holds


@pytest.mark.django_db
def test_a_poll_tells_a_new_90_day_low_after_the_told_one_left_the_window(time_machine):
    """The same through a poll: a lowest watch told ¥880 a hundred days ago, ¥1,000 ever
    since; a drop to ¥950 (the 90-day low) is enqueued."""
    t0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
    time_machine.move_to(t0, tick=False)
    listing = ListingFactory(price=1000, last_polled_at=None)
    PricePoint.objects.bulk_create(
        PricePoint(
            listing=listing,
            observed_at=t0 - dt.timedelta(days=day),
            price=880 if day == 100 else 1000,
            shipping=0,
            in_stock=True,
        )
        for day in range(1, 101)
    )
    told = t0 - dt.timedelta(days=100) + dt.timedelta(hours=1)
    WatchFactory(
        listing=listing,
        trigger=Trigger.LOWEST,
        target_price=None,
        created_at=t0 - dt.timedelta(days=120),
        last_notified_at=told,
        last_notified_price=Decimal(880),
        last_notified_detected_at=told,
    )
    set_product(listing.item_code, price=950)
    assert poll().enqueued == 1


# --- a premium member's target after points ----------------------------------------------


@pytest.mark.parametrize(
    ("since", "fires"),
    [
        (1050, False),  # ¥950 for the member: still below their ¥1,000, no news
        (1150, True),  # ¥1,050 for the member: above their line, and back
    ],
)
def test_a_members_target_re_arms_on_their_own_price_since_they_were_told(since, fires):
    """A premium member's target after points counts member-only points; the history keeps
    everyone's points only. Told ¥900 (¥1,000 − 100 member pt), the price went to `since`
    and came back: the same ¥900 is news again only if the member's own price went above
    their target in between."""
    told_at = NOW - dt.timedelta(hours=5)
    w = told(Trigger.TARGET_PRICE, 900, told_at, target_price=1000, after_points=True)
    after = [Point(told_at + dt.timedelta(hours=1), since, True)]
    before = [Point(told_at - dt.timedelta(hours=1), 1000, True)]
    history = build_history([*before, *after], NOW)
    judgement = detect(w, None, obs(1000, member_points=100), history, members=True)
    assert judgement.value == Decimal(900)
    assert judgement.holds is fires, judgement.reason


# --- back in stock after the watch was edited ---------------------------------------------


def restocked_five_days_ago(t0: dt.datetime) -> Listing:
    """A listing at ¥1,000 for 30 days, out of stock from 10 to 6 days before `t0`."""
    listing = ListingFactory.create(price=1000, last_polled_at=None)
    PricePoint.objects.bulk_create(
        PricePoint(
            listing=listing,
            observed_at=t0 - dt.timedelta(days=day),
            price=1000,
            shipping=0,
            in_stock=not 6 <= day <= 10,
        )
        for day in range(1, 31)
    )
    return listing


@pytest.mark.django_db
def test_back_in_stock_already_told_is_not_told_again_after_the_watch_is_edited(time_machine):
    """Editing a back-in-stock watch to judge after points clears its baseline; the restock
    told five days ago is not told again."""
    from watches.pages.watchlist import update_watch

    t0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
    time_machine.move_to(t0, tick=False)
    listing = restocked_five_days_ago(t0)
    told = t0 - dt.timedelta(days=5) + dt.timedelta(hours=1)
    watch = WatchFactory(
        listing=listing,
        trigger=Trigger.BACK_IN_STOCK,
        target_price=None,
        created_at=t0 - dt.timedelta(days=40),
        last_notified_at=told,
        last_notified_price=Decimal(1000),
        last_notified_detected_at=told - dt.timedelta(minutes=5),
    )
    assert poll().enqueued == 0  # the restock five days ago was told
    update_watch(watch, WatchParams(trigger=Trigger.BACK_IN_STOCK, after_points=True))
    time_machine.move_to(t0 + dt.timedelta(hours=1), tick=False)
    assert poll(codes=[listing.item_code]).enqueued == 0


@pytest.mark.django_db
def test_a_watch_changed_to_back_in_stock_while_in_stock_does_not_fire(time_machine):
    """A target watch made 40 days ago is changed to back-in-stock today, the listing in
    stock for five days: the stock-out before the change is not news."""
    from watches.pages.watchlist import update_watch

    t0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
    time_machine.move_to(t0, tick=False)
    listing = restocked_five_days_ago(t0)
    watch = WatchFactory(listing=listing, target_price=500, created_at=t0 - dt.timedelta(days=40))
    update_watch(watch, WatchParams(trigger=Trigger.BACK_IN_STOCK))
    assert poll().enqueued == 0


@pytest.mark.django_db
def test_a_watch_changed_to_back_in_stock_tells_the_next_restock(time_machine):
    from watches.pages.watchlist import update_watch

    t0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
    time_machine.move_to(t0, tick=False)
    listing = ListingFactory(price=1000, last_polled_at=None)
    watch = WatchFactory(listing=listing, target_price=500, created_at=t0 - dt.timedelta(days=40))
    update_watch(watch, WatchParams(trigger=Trigger.BACK_IN_STOCK))
    set_product(listing.item_code, in_stock=False)
    time_machine.move_to(t0 + dt.timedelta(hours=1), tick=False)
    assert poll().enqueued == 0
    set_product(listing.item_code, in_stock=True)
    time_machine.move_to(t0 + dt.timedelta(hours=2), tick=False)
    assert poll(force=True).enqueued == 1
