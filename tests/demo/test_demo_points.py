"""The demo market's points campaigns, so `make run` shows prices after points without keys:
the seed gives a few shops a campaign (one on, one ended, one to come) and one shop
member-only points; the demo adapter answers them by Rakuten's rule; the tick opens and
closes campaigns."""

from __future__ import annotations

import datetime as dt
import io
import random
import zoneinfo

import pytest
import time_machine
from django.core.management import call_command

from demo.catalogue import CAMPAIGNS, MEMBER_RATES
from demo.market import tick_campaigns
from demo.marketplace import DemoMarketplace
from demo.models import DemoProduct
from demo.seed import seed_demo
from tests.factories import DemoProductFactory
from watches.marketplaces.base import Observation
from watches.models import Listing

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))


def answer(code: str, at: dt.datetime = NOW) -> Observation:
    with time_machine.travel(at, tick=False):
        result = DemoMarketplace().fetch([code])[code]
    assert isinstance(result, Observation)
    return result


def shop_items(shop: str) -> list[DemoProduct]:
    return list(DemoProduct.objects.filter(shop_name=shop).order_by("item_code"))


def test_the_seed_gives_shops_campaigns_on_ended_and_to_come():
    with time_machine.travel(NOW, tick=False):
        seed_demo()
    states = {}
    for shop, (rate, started, _hours) in CAMPAIGNS.items():
        product = shop_items(shop)[0]
        assert product.point_rate == rate
        assert product.points_from == NOW + dt.timedelta(hours=started)
        observed = answer(product.item_code)
        states[shop] = observed.point_rate is not None
        if observed.point_rate:
            assert observed.points_until == product.points_until
            assert observed.points > observed.points_after
    assert sorted(states.values()) == [False, False, True], "one on, one over, one to come"
    for shop in MEMBER_RATES:
        assert answer(shop_items(shop)[0].item_code).member_points > 0


def test_the_seeded_listings_show_their_points_from_the_start():
    with time_machine.travel(NOW, tick=False):
        seed_demo()
    on = next(
        shop for shop, (_, started, hours) in CAMPAIGNS.items() if started < 0 < started + hours
    )
    listing = Listing.objects.get(item_code=shop_items(on)[0].item_code)
    assert listing.point_rate == CAMPAIGNS[on][0] and listing.points > 0
    assert listing.price_points.filter(points__gt=0).exists()


def test_the_demo_answers_points_by_rakutens_rule():
    DemoProductFactory(
        item_code="p", price=1980, point_rate=5, points_until=NOW + dt.timedelta(hours=1)
    )
    observed = answer("p")
    assert (observed.points, observed.points_after, observed.net_price) == (90, 18, 1890)
    assert answer("p", NOW + dt.timedelta(hours=1)).points == 18, "over at its end"


def test_the_tick_clears_an_ended_campaign_and_starts_others():
    with time_machine.travel(NOW, tick=False):
        seed_demo()
    rng = random.Random(4)
    later = NOW + dt.timedelta(days=3)  # every seeded campaign has ended by then
    seen = []
    for hour in range(200):
        seen += tick_campaigns(rng, later + dt.timedelta(hours=hour))
    kinds = {move.what for move in seen}
    assert kinds == {"campaign", "campaign over"}
    for move in seen:
        if move.what == "campaign":
            assert move.rate in (2, 3, 5, 10) and move.start < move.end


def test_a_product_with_a_fault_keeps_its_campaign():
    DemoProductFactory(
        item_code="f", fault="server", point_rate=5, points_until=NOW - dt.timedelta(1)
    )
    tick_campaigns(random.Random(1), NOW)
    assert DemoProduct.objects.get(item_code="f").point_rate == 5


def test_the_tick_command_prints_campaigns_too():
    with time_machine.travel(NOW + dt.timedelta(days=3), tick=False):
        seed_demo()
        out = io.StringIO()
        call_command("demo_market", "tick", "--seed", "1", stdout=out)
    assert "campaign over" in out.getvalue() and "points → x1" in out.getvalue()
