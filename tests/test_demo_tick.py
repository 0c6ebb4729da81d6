"""The demo market's random walk: plausible prices, sales that start and end, stock-outs and
recoveries; and the scheduled tick that looks at the market, then moves it."""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest
from django.core.management import call_command

from tests.factories import DemoProductFactory
from watches import tasks
from watches.demo import CATALOGUE, seed_demo, tick
from watches.models import DemoProduct, Listing

pytestmark = pytest.mark.django_db

LIST_PRICE = {item.code: item.price for item in CATALOGUE}


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
        assert before[move.code][0] == move.old_price
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


def test_demo_market_tick_command_prints_the_moves():
    seed_demo()
    out = io.StringIO()
    call_command("demo_market", "tick", "--times", "3", "--seed", "5", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines
    assert all("→" in line for line in lines)


def test_the_scheduled_demo_tick_polls_the_demo_market_then_moves_it():
    seed_demo()
    before = {p.item_code: p.price for p in DemoProduct.objects.all()}
    counts = tasks.demo_tick()
    assert counts["listings"] == len(CATALOGUE) and counts["errors"] == 0
    # It looked before it moved: the listings show the market as it was.
    for listing in Listing.objects.filter(source="demo"):
        assert listing.price == before[listing.item_code]
