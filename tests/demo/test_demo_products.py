"""The demo market sells some products at several shops: `make run` shows products, their
offers and product watches with no keys."""

from __future__ import annotations

import pytest

from demo.marketplace import DemoMarketplace
from demo.models import DemoProduct
from demo.seed import seed_demo
from tests.commands import output_lines
from watches.marketplaces.base import FetchKind, Offers
from watches.models import Listing, Product, Watch
from watches.products.polling import poll_products

pytestmark = pytest.mark.django_db


def scottie() -> Product:
    product = Listing.objects.get(source="demo", item_code="tp-scottie-12r").product
    assert product is not None, "the seed makes the listing an offer of its product"
    return product


def test_the_seed_makes_products_with_several_shops_each():
    seed_demo()
    product = scottie()
    offers = Listing.objects.filter(product=product)
    assert offers.count() == 5 and len({o.shop_name for o in offers}) == 5
    assert {o.jan for o in offers} == {product.jan} and product.units_per_pack == 12
    assert Product.objects.count() == 4
    assert Watch.objects.filter(product=product, target_price=540).exists()


def test_seeding_twice_adds_nothing():
    first = seed_demo()
    assert set(seed_demo().values()) == {0}
    assert first["demo_items"] == DemoProduct.objects.count()
    assert first["products"] == Product.objects.count() == 4


def test_the_demo_answers_a_jan_with_every_shops_offer_cheapest_first():
    seed_demo()
    answer = DemoMarketplace().offers([scottie().jan])[scottie().jan]
    assert isinstance(answer, Offers) and len(answer.offers) == 5
    prices = [offer.price for offer in answer.offers]
    assert prices == sorted(prices)
    unknown = [o for o in answer.offers if o.item_code == "tp-scottie-12r-s4"]
    assert unknown[0].shipping is None


def test_a_fault_on_one_shop_answers_for_the_whole_product():
    seed_demo()
    DemoProduct.objects.filter(item_code="tp-scottie-12r-s3").update(fault="server")
    answer = DemoMarketplace().offers([scottie().jan])[scottie().jan]
    assert answer.kind == FetchKind.SERVER


def test_an_unknown_jan_is_empty():
    assert DemoMarketplace().offers(["4902102072618"])["4902102072618"].kind == FetchKind.EMPTY


def test_product_polling_observes_every_demo_shop():
    seed_demo()
    DemoProduct.objects.filter(item_code="tp-scottie-12r-s2").update(price=499)
    result = poll_products(force=True)
    assert result.errors == 0 and result.listings == 5 + 4 + 4 + 3
    assert Listing.objects.get(item_code="tp-scottie-12r-s2").price == 499


def test_seed_demo_names_what_it_counts():
    (first,) = output_lines("seed_demo")
    listings = Listing.objects.count()
    assert first.startswith(f"seeded: listings={listings}, products=4, demo_items={listings}, ")
    assert output_lines("seed_demo") == [
        "seeded: listings=0, products=0, demo_items=0, price_points=0, watches=0"
        " (already loaded: nothing new)"
    ]
