"""The demo market's random walk: plausible prices, sales that start and end, stock-outs and
recoveries; a price or stock set by hand kept for DEMO_HOLD_MINUTES; and the scheduled tick
that looks at the market, then moves it."""

from __future__ import annotations

import datetime as dt
import io
import random
import zoneinfo
from collections import Counter

import pytest
import time_machine
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import override_settings
from django_q.models import Schedule

from demo import tasks
from demo.catalogue import CATALOGUE, LIST_PRICE
from demo.market import apply_moves, plan_moves, set_product, tick
from demo.models import DemoProduct
from demo.seed import seed_demo
from tests.factories import DemoProductFactory
from watches.models import Listing

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))


def test_prices_walk_around_the_list_price_with_sales_and_stock_outs():
    seed_demo()
    rng = random.Random(7)
    seen = Counter()
    for _ in range(300):
        for move in tick(rng):
            seen[move.what] += 1
        for product in DemoProduct.objects.all():
            list_price = LIST_PRICE[product.item_code]
            assert 0.7 * list_price <= product.price <= 1.1 * list_price
    assert {"sale", "sale over", "wobble", "sold out", "restocked"} <= set(seen)
    # Sales are events, not the weather.
    assert seen["wobble"] > seen["sale"] > 0


def test_a_tick_saves_what_it_says_it_moved():
    seed_demo()
    before = {p.item_code: (p.price, p.in_stock) for p in DemoProduct.objects.all()}
    moves = tick(random.Random(3))
    assert moves
    for move in moves:
        product = DemoProduct.objects.get(item_code=move.code)
        assert (product.price, product.in_stock) == (move.new_price, move.in_stock)
        assert before[move.code] == (move.old_price, move.was_in_stock)
    unmoved = set(before) - {move.code for move in moves}
    for code in unmoved:
        product = DemoProduct.objects.get(item_code=code)
        assert (product.price, product.in_stock) == before[code]


def test_products_with_a_simulated_fault_or_outside_the_catalogue_stay_put():
    seed_demo()
    DemoProduct.objects.filter(item_code="tp-scottie-12r").update(fault="server", price=123)
    DemoProductFactory(item_code="staff-made", price=777)
    rng = random.Random(11)
    for _ in range(100):
        tick(rng)
    assert DemoProduct.objects.get(item_code="tp-scottie-12r").price == 123
    assert DemoProduct.objects.get(item_code="staff-made").price == 777


# --- a price set by hand is kept ----------------------------------------------------------


def ticks_until_moved(code: str, rng: random.Random, times: int) -> bool:
    """Tick up to `times` times; whether `code` moved."""
    return any(move.code == code for _ in range(times) for move in tick(rng))


@pytest.mark.parametrize("change", [{"price": 520}, {"in_stock": False}], ids=["price", "stock"])
def test_a_price_or_stock_set_by_hand_is_kept_for_the_hold_then_walks_again(settings, change):
    settings.DEMO_HOLD_MINUTES = 30
    rng = random.Random(5)
    with time_machine.travel(NOW, tick=False) as clock:
        seed_demo()
        set_product("tp-scottie-12r", **change)
        product = DemoProduct.objects.get(item_code="tp-scottie-12r")
        assert product.held_until == NOW + dt.timedelta(minutes=30)
        kept = (product.price, product.in_stock)
        clock.shift(dt.timedelta(minutes=29, seconds=59))
        # A hundred ticks within the hold: every other product moves, this one never.
        assert not ticks_until_moved("tp-scottie-12r", rng, 100)
        product.refresh_from_db()
        assert (product.price, product.in_stock) == kept
        clock.shift(dt.timedelta(seconds=1))
        assert ticks_until_moved("tp-scottie-12r", rng, 100)


def test_a_hand_set_made_while_a_tick_was_being_planned_wins():
    seed_demo()
    rng = random.Random(3)
    with time_machine.travel(NOW, tick=False):
        moves = plan_moves(rng, NOW)
        moved = moves[0].code
        set_product(moved, price=111)
        applied = apply_moves(moves, NOW)
    assert moved not in {move.code for move in applied}
    assert len(applied) == len(moves) - 1
    assert DemoProduct.objects.get(item_code=moved).price == 111


def test_a_fault_set_by_hand_does_not_hold_the_price(settings):
    seed_demo()
    product = set_product("tp-scottie-12r", fault="server")
    assert (product.fault, product.held_until) == ("server", None)
    set_product("tp-scottie-12r", fault="")
    assert ticks_until_moved("tp-scottie-12r", random.Random(5), 100)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({}, "nothing to change"),
        ({"price": 0}, "price must be between"),
        ({"price": 10_000_001}, "price must be between"),
        ({"fault": "meltdown"}, "unknown fault"),
    ],
)
def test_a_bad_hand_set_changes_nothing(change, message):
    DemoProductFactory(item_code="tp-a", price=500)
    with pytest.raises(ValueError, match=message):
        set_product("tp-a", **change)
    product = DemoProduct.objects.get(item_code="tp-a")
    assert (product.price, product.fault, product.held_until) == (500, "", None)


def test_an_unknown_product_is_a_lookup_error():
    with pytest.raises(LookupError, match="no demo product 'nope'"):
        set_product("nope", price=100)


# --- the schedule -------------------------------------------------------------------------


def test_demo_market_tick_command_prints_the_moves():
    seed_demo()
    out = io.StringIO()
    call_command("demo_market", "tick", "--times", "3", "--seed", "5", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines
    assert all("→" in line for line in lines)


def test_the_demo_tick_is_scheduled_only_when_enabled(settings):
    settings.DEMO_TICK = True
    call_command("migrate", verbosity=0)
    call_command("migrate", verbosity=0)
    schedule = Schedule.objects.get(name="demo-tick")
    assert schedule.func == "demo.tasks.demo_tick"
    settings.DEMO_TICK = False
    call_command("migrate", verbosity=0)
    assert not Schedule.objects.filter(name="demo-tick").exists()


def test_the_scheduled_demo_tick_polls_the_demo_market_then_moves_it():
    seed_demo()
    before = {p.item_code: p.price for p in DemoProduct.objects.all()}
    counts = tasks.demo_tick()
    assert counts["listings"] == len(CATALOGUE) and counts["errors"] == 0
    # It looked before it moved: the listings show the market as it was.
    for listing in Listing.objects.filter(source="demo"):
        assert listing.price == before[listing.item_code]


def test_a_demo_tick_left_scheduled_after_the_demo_was_switched_off_removes_itself():
    Schedule.objects.create(name="demo-tick", func="demo.tasks.demo_tick", minutes=1)
    others = set(Schedule.objects.exclude(name="demo-tick").values_list("name", flat=True))
    assert "watches-poll" in others
    without_demo = [app for app in django_settings.INSTALLED_APPS if app != "demo"]
    with override_settings(INSTALLED_APPS=without_demo):
        assert tasks.demo_tick() == {"moves": 0}
    assert set(Schedule.objects.values_list("name", flat=True)) == others
