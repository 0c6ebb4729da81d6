"""What the adapters make of answers a marketplace may give: a campaign "until further
notice", a price before tax, one unreadable item among readable ones."""

from __future__ import annotations

import datetime as dt

import pytest

from watches.marketplaces.base import Ask, Observation, Offers, Page, Shape
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.yahoo import YahooMarketplace
from watches.polling import observations

CODE = "yasu-shop:tp-12r"
OTHER = "yasu-shop:dt-2k"
JAN = "4901750404406"
NOW = dt.datetime(2026, 12, 6, 10, 0, tzinfo=dt.UTC)


# A campaign end the datetime type cannot move past: until further notice.


def test_a_far_future_point_window_does_not_crash_the_batch(ichiba):
    ichiba.add(OTHER, price=2000)
    ichiba.add(
        CODE,
        price=1100,
        pointRate=5,
        pointRateStartTime="2026-01-01 00:00",
        pointRateEndTime="9999-12-31 23:59",  # "until further notice"
    )
    # The adapter's contract: never raises for an outcome of the outside world.
    results = RakutenMarketplace().fetch([OTHER, CODE])
    assert isinstance(results[OTHER], Observation) and results[OTHER].price == 2000
    far = results[CODE]
    assert isinstance(far, Observation), far
    # 5× on ¥1,000 before tax, as a multiplier with no end: until an answer says otherwise.
    assert (far.points, far.points_until) == (50, None)


@pytest.mark.django_db
def test_a_far_future_point_window_costs_only_its_own_item(ichiba):
    ichiba.add(OTHER, price=2000)
    ichiba.add(CODE, pointRate=5, pointRateStartTime="", pointRateEndTime="9999-12-31 23:59")
    results = observations.fetch("rakuten", [OTHER, CODE])
    # The neighbour was asked and answered: its answer must not be thrown away.
    assert isinstance(results[OTHER], Observation), results[OTHER]


# taxFlag 1: the price is tax-excluded, and is reported as what the shopper pays.


def test_a_tax_excluded_price_is_reported_with_its_tax(ichiba):
    # taxFlag 1 (税別): ¥1,000 before tax, ¥1,100 to pay at the standard 10 %.
    ichiba.add(CODE, price=1000, taxFlag=1)
    result = RakutenMarketplace().fetch([CODE])[CODE]
    assert isinstance(result, Observation)
    assert result.points == 10  # 1 % of the tax-excluded ¥1,000: already right
    assert result.price == 1100
    assert result.effective_price == 1100
    assert result.net_price == 1090


# One unreadable item: skipped, the rest of its answer read.


def test_one_unreadable_offer_does_not_hide_every_other_shops_offer(ichiba):
    ichiba.add("shop-a:x", jan=JAN, price=900)
    ichiba.add("shop-b:y", jan=JAN, price=1000)
    ichiba.add("shop-c:z", jan=JAN, price=1100)
    del ichiba.items["shop-b:y"]["itemPrice"]  # one shop's odd item
    result = RakutenMarketplace().offers([JAN])[JAN]
    assert isinstance(result, Offers), result
    assert {offer.item_code for offer in result.offers} == {"shop-a:x", "shop-c:z"}
    # An offer left out unread must not be taken for gone.
    assert result.complete is False


def test_one_unreadable_item_does_not_fail_its_shops_page(ichiba):
    for n in range(3):
        ichiba.add(f"yasu-shop:item-{n}", price=1000 + n)
    ichiba.items["yasu-shop:item-1"]["availability"] = "1"  # one odd item
    ask = Ask(Shape.SHOP, "yasu-shop")
    result = RakutenMarketplace().pages([ask])[ask]
    assert isinstance(result, Page), result
    assert sorted(item.item_code for item in result.items) == [
        "yasu-shop:item-0",
        "yasu-shop:item-2",
    ]
    assert result.unread == 1


def test_a_shop_page_with_an_unreadable_item_does_not_vouch_for_what_it_may_hide():
    from watches.models import ShopFeed
    from watches.polling import feeds

    first = Observation("s:1", 1000, True, NOW - dt.timedelta(hours=1))
    second = Observation("s:2", 1000, True, NOW - dt.timedelta(hours=1))
    feed = ShopFeed(source="rakuten", shop="s")
    feeds._learn_from(feed, Page(Ask(Shape.SHOP, "s"), (first, second), first.observed_at), 30)
    again = Page(Ask(Shape.SHOP, "s"), (first, second), NOW, unread=1)

    feeds._learn_from(feed, again, 30)

    assert feed.complete_since == NOW, "the chain starts again: the unread item may be a change"


def test_one_unreadable_yahoo_hit_does_not_hide_the_other_offers(yahoo):
    yahoo.add("store-a_x", jan=JAN, price=900)
    yahoo.add("store-b_y", jan=JAN, price=1000)
    yahoo.items["store-b_y"]["inStock"] = "true"  # one odd hit
    result = YahooMarketplace().offers([JAN])[JAN]
    assert isinstance(result, Offers), result
    assert [offer.item_code for offer in result.offers] == ["store-a_x"]
    assert result.complete is False
