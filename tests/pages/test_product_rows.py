"""A product shows once wherever things to buy are listed — "Cheap right now", a search, all
listings — and its big number is its cheapest offer in stock (price plus known shipping; an
unknown shipping is never shown as free), with that offer's per-unit price on the product's
pack. A search or a category finds it through any of its active offers."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import quote

import pytest
import time_machine

from tests.factories import ListingFactory, with_history
from watches.models import Listing, Product
from watches.search.query import cheap_now

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
NAME = "スコッティ フラワーパック 12ロール ダブル"


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def offer(product: Product, price: int, usual: int, *, shipping: int | None = 0) -> Listing:
    """An offer of `product` at `price` now, after 40 days at `usual`."""
    listing = ListingFactory.create(
        name=NAME, category="トイレットペーパー", price=price, shipping=shipping
    )
    Listing.objects.filter(pk=listing.pk).update(product=product, jan=product.jan)
    listing.refresh_from_db()
    return with_history(listing, [usual] * 40 + [price], now=NOW)


@pytest.fixture
def scottie() -> Product:
    """Five shops; the first offer is at ¥431 (down from ¥500), the cheapest at ¥401."""
    product = Product.objects.create(
        jan="4901750404406", name=NAME, units_per_pack=12, unit_label="roll"
    )
    offer(product, 431, 500)
    offer(product, 401, 450)
    offer(product, 520, 520)
    offer(product, 530, 530, shipping=None)
    offer(product, 612, 612)
    return product


def joined(product: Product, **fields) -> Listing:
    """A listing tracked by its link, then made an offer of `product` as `offer_listing` joins
    it: its own fields (pack size, category) are kept."""
    listing = ListingFactory.create(**fields)
    Listing.objects.filter(pk=listing.pk).update(product=product, jan=product.jan)
    listing.refresh_from_db()
    return listing


def rows(html: str) -> list[str]:
    """The text of each row of a list of things to buy, tags left out."""
    parts = html.split('<li class="card listing-row">')[1:]
    return [" ".join(re.sub(r"<[^>]+>", " ", part.split("</li>")[0]).split()) for part in parts]


def cheap_section(html: str) -> str:
    return html.split('id="cheap-h"')[1].split("</section>")[0]


def all_section(html: str) -> str:
    return html.split('id="all-h"')[1]


def test_cheap_right_now_lists_a_product_once_at_its_cheapest_offer(client, scottie):
    html = client.get("/").content.decode()
    cheap = rows(cheap_section(html))
    assert len(cheap) == 1
    assert re.findall(r'class="price">([^<]+)<', cheap_section(html)) == ["¥401"]
    assert "¥431" not in cheap[0]
    assert "from ¥401 at 5 shops" in cheap[0]
    assert "¥33.42 per roll" in cheap[0]  # ¥401 / 12, on the product's pack
    assert "−10.9% vs typical" in cheap[0]  # against ¥450, the lowest any shop usually asks
    assert f'href="/products/{scottie.pk}/"' in cheap_section(html)


def test_search_and_all_listings_show_the_product_once_at_its_cheapest_offer(client, scottie):
    for html in (
        client.get("/", {"q": "スコッティ"}).content.decode(),
        all_section(client.get("/").content.decode()),
    ):
        found = rows(html)
        assert len(found) == 1
        assert re.findall(r'class="price">([^<]+)<', html) == ["¥401"]
        assert "from ¥401 at 5 shops" in found[0] and "¥33.42 per roll" in found[0]


def test_an_offer_with_unknown_shipping_is_never_shown_as_free(client, scottie):
    cheapest = Listing.objects.get(product=scottie, price=401)
    Listing.objects.filter(pk=cheapest.pk).update(price=390, shipping=None)
    from watches.pages import pagecache

    pagecache.prices_changed()
    found = rows(client.get("/", {"q": "スコッティ"}).content.decode())
    assert "from ¥390 at 5 shops" in found[0]
    assert "¥390 shipping unknown" in found[0] and "free" not in found[0]


def test_no_shop_in_stock_shows_the_product_once_as_out_of_stock(client, scottie):
    Listing.objects.filter(product=scottie).update(in_stock=False)
    found = rows(client.get("/", {"q": "スコッティ"}).content.decode())
    assert len(found) == 1
    assert "No shop has it in stock" in found[0] and "Out of stock" in found[0]


def test_a_product_is_not_cheap_when_its_cheapest_shop_asks_its_usual_price():
    product = Product.objects.create(jan="4901750404406", name=NAME, units_per_pack=12)
    offer(product, 431, 500)  # one shop dropped…
    offer(product, 401, 401)  # …to above what another always asks
    assert cheap_now() == []


def test_products_and_listings_share_one_list_biggest_drop_first(scottie):
    small = with_history(ListingFactory(name="small drop", price=950), [1000] * 40 + [950], now=NOW)
    big = with_history(ListingFactory(name="big drop", price=700), [1000] * 40 + [700], now=NOW)
    found = cheap_now()
    assert [item.pk for item in found] == [big.pk, scottie.pk, small.pk]
    assert isinstance(found[1], Product)


def test_a_products_row_prices_per_unit_on_the_products_pack(client):
    """Its best offer has no pack size of its own (tracked by its link before): the row still
    says the unit price its product's watches judge (decision 0084)."""
    product = Product.objects.create(
        jan="4901750404406", name=NAME, units_per_pack=12, unit_label="roll"
    )
    joined(product, name=NAME, price=600, shipping=0, points=0, units_per_pack=None)
    found = rows(client.get("/", {"q": "スコッティ"}).content.decode())
    assert len(found) == 1 and "from ¥600 at 1 shop" in found[0]
    assert "¥50 per roll" in found[0]


def test_search_finds_a_product_by_any_of_its_offers_names(client):
    """Its first offer's name does not say スコッティ, its row's (the product's) and another
    shop's offer's do: one row, the product's."""
    product = Product.objects.create(jan="4901750404406", name=NAME, units_per_pack=12)
    joined(product, name="トイレットペーパー 12ロール ダブル 日本製", price=450)
    joined(product, name=NAME, price=420)
    html = client.get("/", {"q": "スコッティ"}).content.decode()
    assert len(rows(html)) == 1, rows(html)
    assert f'href="/products/{product.pk}/"' in html


def test_a_category_chip_shows_the_product_whose_offer_is_in_that_category(client):
    """An offer found by its JAN code has no category; the chip offered for another shop's
    offer's category lists the product."""
    product = Product.objects.create(jan="4901750404406", name=NAME, units_per_pack=12)
    joined(product, name=NAME, category="", price=450)
    joined(product, name=NAME, category="トイレットペーパー", price=420)
    assert "?category=" + quote("トイレットペーパー") in client.get("/").content.decode()
    for params in (
        {"category": "トイレットペーパー"},
        {"category": "トイレットペーパー", "q": "ダブル"},
    ):
        html = client.get("/", params).content.decode()
        assert len(rows(html)) == 1, (params, rows(html))
        assert f'href="/products/{product.pk}/"' in html
