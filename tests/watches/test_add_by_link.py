"""Add by link: paste a marketplace item URL or code on the home page, get its listing page —
or a clear message next to the field. The pasted URL is only parsed, never fetched."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from tests.factories import DemoProductFactory, ListingFactory
from watches.models import Listing, PricePoint
from watches.polling.observations import fetch

pytestmark = pytest.mark.django_db


def add(client, text: str):
    return client.post("/add/", {"link": text})


def link_error(response) -> str:
    assert response.status_code == 200
    body = response.content.decode()
    match = re.search(r'<ul class="errorlist" id="id_link_error">(.*?)</ul>', body, re.S)
    assert match, "no error next to the link field"
    assert "<details" in body and 'id="add" open' in body, "the form stays open"
    return html.unescape(re.sub(r"<[^>]+>", "", match[1])).strip()


def test_a_demo_code_opens_its_new_listing_page(client):
    DemoProductFactory(item_code="tp-test-12r", name="テスト トイレットペーパー", price=598)
    response = add(client, "tp-test-12r")
    listing = Listing.objects.get(item_code="tp-test-12r")
    assert response.status_code == 302 and response["Location"] == f"/listings/{listing.pk}/"
    assert (listing.name, listing.price) == ("テスト トイレットペーパー", 598)
    assert PricePoint.objects.filter(listing=listing).count() == 1


def test_a_rakuten_url_is_fetched_through_the_adapter(client, ichiba):
    ichiba.add("yasu-shop:tp-12r", itemName="楽天のトイレットペーパー", price=880)
    response = add(client, "https://item.rakuten.co.jp/yasu-shop/tp-12r/?s-id=top")
    listing = Listing.objects.get(source="rakuten")
    assert response["Location"] == f"/listings/{listing.pk}/"
    assert (listing.item_code, listing.name, listing.price) == (
        "yasu-shop:tp-12r",
        "楽天のトイレットペーパー",
        880,
    )
    # The marketplace's API was asked about the code; the pasted page itself never was.
    assert ichiba.asked("yasu-shop:tp-12r") == 1


def test_an_item_added_by_link_keeps_the_points_its_first_answer_carried(client, ichiba):
    """Kept by the rule polling keeps: a listing saved without its points would show "Now
    ¥1,000" while the shop gives 90 pt, and its first point would have none."""
    ichiba.add("yasu-shop:tp-12r", itemName="楽天のトイレットペーパー", price=1000)
    ichiba.campaign("yasu-shop:tp-12r", 10, "2020-01-01 00:00", "2099-12-31 23:59")
    answer = fetch("rakuten", ["yasu-shop:tp-12r"])["yasu-shop:tp-12r"]
    assert answer.points > 0  # what the marketplace says the shopper gets now

    add(client, "https://item.rakuten.co.jp/yasu-shop/tp-12r/")
    listing = Listing.objects.get(source="rakuten")
    assert (listing.points, listing.points_until, listing.point_rate) == (
        answer.points,
        answer.points_until,
        answer.point_rate,
    )
    assert PricePoint.objects.get(listing=listing).points == answer.points
    assert listing.low_90_net == listing.effective_price - answer.points
    assert "Now, after points" in client.get(f"/listings/{listing.pk}/").content.decode()


def test_a_known_item_is_opened_without_asking_the_marketplace(client):
    listing = ListingFactory(
        item_code="tp-known", product=False
    )  # no demo product: a fetch would fail
    response = add(client, "TP-KNOWN")
    assert response["Location"] == f"/listings/{listing.pk}/"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("https://www.amazon.co.jp/dp/B000000", "cannot follow items on www.amazon.co.jp"),
        ("https://search.rakuten.co.jp/search/mall/tp/", "not an item page"),
        ("ftp://item.rakuten.co.jp/shop/item/", "Only web addresses"),
        ("https://item.rakuten.co.jp:8080/shop/item/", "not a plain item page address"),
        ("トイレットペーパー", "is not an item code"),
        ("tp scottie", "no spaces"),
        ("", "Paste the item's address"),
        ("x" * 1001, "too long"),
    ],
)
def test_a_bad_link_is_told_next_to_the_field(client, text, words):
    assert words in link_error(add(client, text))
    assert Listing.objects.count() == 0


def test_a_rakuten_link_without_rakuten_configured_says_so(client):
    message = link_error(add(client, "https://item.rakuten.co.jp/yasu-shop/tp-12r/"))
    assert message == (
        "This Yasugoro is not connected to Rakuten Ichiba, so its items cannot be added. "
        "Here you can watch the demo market's items: search for them above."
    )


def test_an_amazon_link_never_claims_rakuten_works_where_it_does_not(client):
    message = link_error(add(client, "https://www.amazon.co.jp/dp/B000000"))
    assert message == (
        "Yasugoro cannot follow items on www.amazon.co.jp. "
        "Here you can watch the demo market's items: search for them above."
    )
    assert "Rakuten" not in message


def test_an_amazon_link_points_at_rakuten_where_it_is_configured(client, ichiba):
    message = link_error(add(client, "https://www.amazon.co.jp/dp/B000000"))
    assert message == (
        "Yasugoro cannot follow items on www.amazon.co.jp. Paste the address of a Rakuten "
        "Ichiba item (https://item.rakuten.co.jp/shop/item/)."
    )


def test_an_unknown_item_is_told(client):
    assert "Demo market has no item no-such-item." in link_error(add(client, "no-such-item"))
    assert Listing.objects.count() == 0


@pytest.mark.parametrize(
    ("fault", "words"),
    [("network", "could not be reached right now"), ("rate_limited", "busy right now")],
)
def test_an_unreachable_marketplace_is_told(client, fault, words):
    DemoProductFactory(item_code="tp-faulty", fault=fault)
    assert words in link_error(add(client, "tp-faulty"))
    assert Listing.objects.count() == 0


def test_an_item_rakuten_does_not_have_is_told(client, ichiba):
    assert "Rakuten Ichiba has no offer for yasu-shop:nothing right now" in link_error(
        add(client, "https://item.rakuten.co.jp/yasu-shop/nothing/")
    )


def test_adding_needs_csrf():
    DemoProductFactory(item_code="tp-csrf")
    assert Client(enforce_csrf_checks=True).post("/add/", {"link": "tp-csrf"}).status_code == 403
    assert Listing.objects.count() == 0


def test_a_get_of_the_add_url_goes_home(client):
    response = client.get("/add/")
    assert response.status_code == 302 and response["Location"] == "/#add"


def test_adding_is_limited_per_minute(client):
    for n in range(10):
        DemoProductFactory(item_code=f"tp-many-{n}")
        assert add(client, f"tp-many-{n}").status_code == 302
    DemoProductFactory(item_code="tp-one-too-many")
    assert "Wait a minute" in link_error(add(client, "tp-one-too-many"))


def test_behind_the_proxy_the_limit_is_per_forwarded_address(client, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    for n in range(10):
        DemoProductFactory(item_code=f"tp-a-{n}")
        response = client.post(
            "/add/", {"link": f"tp-a-{n}"}, headers={"x-forwarded-for": "203.0.113.7"}
        )
        assert response.status_code == 302
    DemoProductFactory(item_code="tp-b")
    # Someone else behind the same proxy is not held back by the first person's adds, even
    # when they put the first person's address in front.
    response = client.post(
        "/add/", {"link": "tp-b"}, headers={"x-forwarded-for": "203.0.113.7, 198.51.100.2"}
    )
    assert response.status_code == 302
