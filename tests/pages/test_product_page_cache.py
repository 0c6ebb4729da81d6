"""A product's page as a first visit gets it, cached whole until the product or one of its
offers changes (watches.pages.pagecache): served again without a query, with the
visitor's own CSRF token; after a poll, only what a poll changes is rendered again — the
chart, the figures and the watch form come from the cache while no price point was added."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.test import Client

from tests.factories import ListingFactory, device_with_cookie, with_history
from watches.models import Listing, PricePoint, Product, Trigger, Watch
from watches.pages import pagecache
from watches.pausing import pause_listings
from watches.products.intake import adopt_listings
from watches.products.polling import save_poll_state

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
NAME = "スコッティ フラワーパック 12ロール ダブル"


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def offer(product: Product, price: int, shop: str) -> Listing:
    listing = ListingFactory.create(name=NAME, shop_name=shop, price=price)
    Listing.objects.filter(pk=listing.pk).update(product=product, jan=product.jan)
    listing.refresh_from_db()
    return with_history(listing, [price + 50] * 20 + [price], now=NOW)


@pytest.fixture
def product(django_capture_on_commit_callbacks) -> Product:
    product = Product.objects.create(
        jan="4901750404406", name=NAME, units_per_pack=12, unit_label="roll"
    )
    with django_capture_on_commit_callbacks(execute=True):
        for price, shop in ((620, "ショップA"), (505, "ショップB"), (550, "ショップC")):
            offer(product, price, shop)
    return product


def poll(listing: Listing, price: int, at: dt.datetime) -> None:
    """One answer for `listing`, kept as a poll keeps it."""
    from watches.marketplaces.base import Observation
    from watches.polling.observations import observe

    listing.refresh_from_db()
    answer = Observation(listing.item_code, price, True, at, shipping=0)
    observe([(listing, answer)], at).save()


def token(body: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body)
    assert found is not None, "the page has no CSRF token"
    return found.group(1)


def chart(body: str) -> str:
    return body[body.index('<figure class="chart">') : body.index("</figure>")]


def url(product: Product) -> str:
    return f"/products/{product.pk}/"


def test_a_first_visit_is_served_again_without_a_query_with_its_own_token(
    product, django_assert_num_queries
):
    first = Client().get(url(product)).content.decode()
    with django_assert_num_queries(0):
        again = Client().get(url(product)).content.decode()
    assert "from ¥505 at 3 shops" in again and "ショップB" in again
    assert token(first) != token(again)
    assert pagecache.CSRF_PLACEHOLDER not in again


def test_an_offer_s_new_price_shows_at_once(client, product, django_capture_on_commit_callbacks):
    client.get(url(product))
    cheapest = Listing.objects.get(product=product, shop_name="ショップC")
    with django_capture_on_commit_callbacks(execute=True):
        poll(cheapest, 480, NOW + dt.timedelta(minutes=15))
    body = client.get(url(product)).content.decode()
    assert "from ¥480 at 3 shops" in body
    assert "¥480" in chart(body), "the new low is drawn"


def test_another_listing_s_new_price_leaves_the_product_page_cached(
    client, product, django_capture_on_commit_callbacks, django_assert_num_queries
):
    other = ListingFactory(price=800)
    before = client.get(url(product)).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        poll(other, 650, NOW + dt.timedelta(minutes=15))
    with django_assert_num_queries(0):
        after = client.get(url(product)).content.decode()
    assert after.replace(token(after), "") == before.replace(token(before), "")


def test_a_poll_that_adds_no_point_shows_its_time_and_keeps_the_chart_cached(
    product, django_capture_on_commit_callbacks, django_assert_num_queries
):
    english = Client(HTTP_ACCEPT_LANGUAGE="en")
    shop_b = Listing.objects.get(product=product, shop_name="ショップB")
    with django_capture_on_commit_callbacks(execute=True):
        poll(shop_b, 505, NOW)  # a point now: the next poll's same price adds none
    first = english.get(url(product)).content.decode()
    points = PricePoint.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        poll(shop_b, 505, NOW + dt.timedelta(minutes=1))  # the same price: no new point
    assert PricePoint.objects.count() == points
    # The product and its offers with their newest points: the chart, its figures, the
    # frame, the form and the main column (but for the times of the checks) come cached.
    with django_assert_num_queries(2):
        body = english.get(url(product)).content.decode()
    assert "Checked Nov 29, 12:01" in body
    assert chart(body) == chart(first)


def test_an_offer_paused_or_joining_shows_at_once(
    client, product, django_capture_on_commit_callbacks
):
    assert "ショップA" in client.get(url(product)).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        pause_listings([Listing.objects.get(shop_name="ショップA").pk], actor="staff")
    assert "ショップA" not in client.get(url(product)).content.decode()
    # A listing whose JAN code is the product's joins it (as intake and polling join them).
    ListingFactory(name=NAME, shop_name="ショップD", price=470, jan=product.jan)
    with django_capture_on_commit_callbacks(execute=True):
        assert adopt_listings(product) == 1
    body = client.get(url(product)).content.decode()
    assert "ショップD" in body and "from ¥470 at 3 shops" in body


def test_the_product_s_own_change_shows_at_once(product, django_capture_on_commit_callbacks):
    english = Client(HTTP_ACCEPT_LANGUAGE="en")
    assert "Every shop last checked" not in english.get(url(product)).content.decode()
    product.name = "スコッティ 3倍長持ち"
    product.save()
    assert "スコッティ 3倍長持ち" in english.get(url(product)).content.decode()
    with django_capture_on_commit_callbacks(execute=True):  # a poll of every shop, recorded
        save_poll_state([Product(pk=product.pk, last_polled_at=NOW, last_error="")])
    assert "Every shop last checked Nov 29, 12:00." in english.get(url(product)).content.decode()


def test_a_device_s_own_watches_are_never_served_from_the_shared_page(client, product):
    assert "You are watching this" not in Client().get(url(product)).content.decode()
    device, _ = device_with_cookie(client)
    Watch.objects.create(
        device=device,
        product=product,
        listing=Listing.objects.get(shop_name="ショップB"),
        trigger=Trigger.TARGET_PRICE,
        target_price=480,
    )
    body = client.get(url(product)).content.decode()
    assert "You are watching this" in body
    assert "No sign-up" not in body
    assert "You are watching this" not in Client().get(url(product)).content.decode()


def test_a_deleted_product_is_gone_from_its_cached_page(product):
    assert Client().get(url(product)).status_code == 200
    product.delete()
    assert Client().get(url(product)).status_code == 404


@pytest.mark.parametrize("product_id", [2**63, 10**30])
def test_a_product_id_beyond_any_row_is_404_not_500(client, product_id):
    assert client.get(f"/products/{product_id}/").status_code == 404
    assert client.post(f"/products/{product_id}/", {"trigger": "lowest"}).status_code == 404
