"""`manage.py demo_market`: `list` shows each product's simulated fault and any hold after a
change by hand; `set` changes price, stock or fault and says how long the tick holds off; bad
input is one clear line and changes nothing."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine
from django.core.management.base import CommandError

from demo.management.commands.demo_market import product_line
from demo.models import DemoProduct
from tests.commands import output_lines
from tests.factories import DemoProductFactory

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))


def demo_market(*args: str) -> list[str]:
    return output_lines("demo_market", *args)


@pytest.fixture(autouse=True)
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def test_list_shows_each_products_fault_and_hold(settings):
    settings.DEMO_HOLD_MINUTES = 30
    DemoProductFactory(item_code="a-normal", name="普通", price=598)
    DemoProductFactory(item_code="b-faulty", name="故障", price=1280, fault="rate_limited")
    DemoProductFactory(
        item_code="c-held",
        name="手動",
        price=520,
        in_stock=False,
        held_until=NOW + dt.timedelta(minutes=12),
    )
    DemoProductFactory(
        item_code="d-both",
        name="両方",
        price=99,
        fault="bad_response",
        held_until=NOW + dt.timedelta(minutes=1),
    )
    DemoProductFactory(item_code="e-expired", name="以前", price=10, held_until=NOW)
    lines = demo_market("list")
    assert [line.split()[0] for line in lines] == [
        "a-normal",
        "b-faulty",
        "c-held",
        "d-both",
        "e-expired",
    ]
    assert lines[0].split() == ["a-normal", "¥", "598", "in", "stock", "-", "普通"]
    assert "fault=rate_limited" in lines[1] and "held until" not in lines[1]
    assert "OUT OF STOCK" in lines[2] and "held until 10:12" in lines[2]
    assert "fault=bad_response, held until 10:01" in lines[3]
    # A hold that has run out is not shown.
    assert lines[4].split()[5] == "-"


def test_every_fault_the_marketplace_simulates_can_be_listed():
    for fault in DemoProduct.Fault.values:
        product = DemoProductFactory(item_code=f"x-{fault or 'none'}", fault=fault)
        line = product_line(product, NOW)
        assert (f"fault={fault}" in line) == bool(fault)


def test_set_a_price_holds_it_and_says_until_when(settings):
    settings.DEMO_HOLD_MINUTES = 30
    DemoProductFactory(item_code="tp-a", price=598)
    line, note = demo_market("set", "tp-a", "--price", "520")
    assert line.split()[:3] == ["tp-a", "¥", "520"] and "held until 10:30" in line
    assert note == "The demo tick leaves it as set until 10:30 (DEMO_HOLD_MINUTES)."
    product = DemoProduct.objects.get(item_code="tp-a")
    assert (product.price, product.held_until) == (520, NOW + dt.timedelta(minutes=30))


def test_set_and_lift_a_fault():
    DemoProductFactory(item_code="tp-a")
    (line,) = demo_market("set", "tp-a", "--fault", "server")
    assert "fault=server" in line
    assert DemoProduct.objects.get(item_code="tp-a").fault == "server"
    (line,) = demo_market("set", "tp-a", "--fault", "none")
    assert "fault=" not in line
    product = DemoProduct.objects.get(item_code="tp-a")
    assert (product.fault, product.held_until) == ("", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--price", "100"], "no demo product 'nope'"),
        (["tp-a"], "nothing to change"),
        (["tp-a", "--price", "0"], "price must be between ¥1 and ¥10,000,000"),
        (["tp-a", "--price", "-5"], "price must be between"),
    ],
)
def test_bad_input_is_one_clear_error_and_changes_nothing(args, message):
    DemoProductFactory(item_code="tp-a", price=598)
    with pytest.raises(CommandError, match=message):
        demo_market("set", *args)
    product = DemoProduct.objects.get(item_code="tp-a")
    assert (product.price, product.fault, product.held_until) == (598, "", None)


def test_an_unknown_fault_is_refused_by_the_parser():
    DemoProductFactory(item_code="tp-a")
    with pytest.raises(CommandError, match="invalid choice: 'meltdown'"):
        demo_market("set", "tp-a", "--fault", "meltdown")
    assert DemoProduct.objects.get(item_code="tp-a").fault == ""
