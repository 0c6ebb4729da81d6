"""Listing intake: codes and URLs to listings, with a clear error for every bad input — and
never a request to a URL someone pasted."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import DemoProductFactory, ListingFactory
from watches.intake import IntakeError, ItemRef, add_listing, parse_item_ref
from watches.models import Listing, PricePoint, Source

pytestmark = pytest.mark.django_db

ITEM_URL = "https://item.rakuten.co.jp/yasu-shop/tp-12r/"


# --- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "https://item.rakuten.co.jp/yasu-shop/tp-12r/",
        "https://item.rakuten.co.jp/yasu-shop/tp-12r",
        "http://item.rakuten.co.jp/yasu-shop/tp-12r/",
        "https://item.rakuten.co.jp/yasu-shop/tp-12r/?s-id=top_normal_browsehist&iasid=x#reviews",
        "HTTPS://ITEM.RAKUTEN.CO.JP/Yasu-Shop/TP-12R/",
        "  https://item.rakuten.co.jp/yasu-shop/tp-12r/\n",
        "item.rakuten.co.jp/yasu-shop/tp-12r/",
        "https://item.rakuten.co.jp./yasu-shop/tp-12r/",
        "yasu-shop:tp-12r",
        "YASU-SHOP:tp-12r",
    ],
)
def test_rakuten_urls_and_codes_become_the_item_code(ichiba, text):
    assert parse_item_ref(text) == ItemRef(Source.RAKUTEN, "yasu-shop:tp-12r")


def test_a_numeric_item_number_is_kept(ichiba):
    ref = parse_item_ref("https://item.rakuten.co.jp/kenkocom/10001234/")
    assert ref == ItemRef(Source.RAKUTEN, "kenkocom:10001234")


def test_a_demo_code_is_a_demo_item():
    assert parse_item_ref("tp-scottie-12r") == ItemRef(Source.DEMO, "tp-scottie-12r")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (None, "empty"),
        (12345, "empty"),
        ("", "empty"),
        ("   ", "empty"),
        ("x" * 5000, "too_long"),
        ("tp scottie", "bad_code"),
        ("tp-scottie\x00", "bad_code"),
        ("トイレットペーパー", "bad_code"),
        ("shop:item:extra", "bad_code"),
        (":item", "bad_code"),
        ("shop:", "bad_code"),
        ("javascript:alert(1)", "bad_code"),
        ("file:///etc/passwd", "bad_url"),
        ("ftp://item.rakuten.co.jp/shop/item/", "bad_url"),
        ("http://[::1/shop/item/", "bad_url"),
        ("https://item.rakuten.co.jp:8443/shop/item/", "bad_url"),
        ("https://user:pw@item.rakuten.co.jp/shop/item/", "bad_url"),
        ("https://item.rakuten.co.jp/shop/it%20em/", "bad_url"),
        ("https://item.rakuten.co.jp/shop/アイテム/", "bad_url"),
        ("https://", "bad_url"),
        ("https://item.rakuten.co.jp/", "not_item_page"),
        ("https://item.rakuten.co.jp/shop/", "not_item_page"),
        ("https://item.rakuten.co.jp/shop/item/extra/", "not_item_page"),
        ("https://item.rakuten.co.jp//item/", "not_item_page"),
        ("https://www.rakuten.co.jp/shop/", "not_item_page"),
        ("https://search.rakuten.co.jp/search/mall/toilet/", "not_item_page"),
        ("https://www.amazon.co.jp/dp/B000000000", "unknown_host"),
        ("https://item.rakuten.co.jp.evil.example/shop/item/", "unknown_host"),
        ("https://item.rakuten.co.jp@evil.example/shop/item/", "bad_url"),
        ("http://127.0.0.1:8000/admin/", "unknown_host"),
        ("http://169.254.169.254/latest/meta-data/", "unknown_host"),
        ("www.example.com/shop/item", "unknown_host"),
    ],
)
def test_every_bad_input_is_a_clear_intake_error(ichiba, text, code):
    with pytest.raises(IntakeError) as caught:
        add_listing(text)
    assert caught.value.code == code
    assert caught.value.message and str(caught.value) == caught.value.message
    assert ichiba.requests == []
    assert not Listing.objects.exists()


def test_a_url_is_never_fetched_only_parsed(ichiba):
    # Even one pointing at a server that would answer: it is simply not a supported host.
    with pytest.raises(IntakeError) as caught:
        add_listing(ichiba.url + "?itemCode=yasu-shop:tp-12r")
    assert caught.value.code == "unknown_host"
    assert ichiba.requests == []


def test_a_rakuten_item_without_an_application_id_is_not_available(settings):
    assert "rakuten" not in settings.MARKETPLACE_ADAPTERS
    with pytest.raises(IntakeError) as caught:
        add_listing(ITEM_URL)
    assert caught.value.code == "unknown_source"
    assert "Rakuten Ichiba" in caught.value.message


# --- the first fetch ----------------------------------------------------------------------


def test_an_unknown_demo_code_is_not_found():
    with pytest.raises(IntakeError) as caught:
        add_listing("no-such-product")
    assert caught.value.code == "not_found"
    assert "no-such-product" in caught.value.message


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        ("not_found", "not_found"),
        ("empty", "not_found"),
        ("server", "unreachable"),
        ("stall", "unreachable"),
        ("malformed", "unreachable"),
        ("rate_limited", "unreachable"),
    ],
)
def test_what_the_marketplace_says_becomes_a_clear_error(ichiba, behaviour, code):
    ichiba.add("yasu-shop:tp-12r")
    ichiba.behave["yasu-shop:tp-12r"] = behaviour
    with pytest.raises(IntakeError) as caught:
        add_listing(ITEM_URL)
    assert caught.value.code == code
    assert "Rakuten Ichiba" in caught.value.message
    assert not Listing.objects.exists()


def test_an_unreachable_marketplace_is_a_clear_error(ichiba, settings):
    settings.RAKUTEN_API_URL = "http://127.0.0.1:9/"  # the discard port: refused
    with pytest.raises(IntakeError) as caught:
        add_listing(ITEM_URL)
    assert caught.value.code == "unreachable"


def test_a_rakuten_item_becomes_a_listing_filled_by_the_first_fetch(ichiba):
    ichiba.add("yasu-shop:tp-12r", price=1280, postageFlag=1)
    listing = add_listing(ITEM_URL, units_per_pack=12, unit_label="roll")
    assert (listing.source, listing.item_code) == ("rakuten", "yasu-shop:tp-12r")
    assert listing.name == "テスト商品 tp-12r"
    assert listing.shop_name == "ショップ yasu-shop"
    assert listing.url == ITEM_URL
    assert listing.image_url.startswith("https://thumbnail.image.rakuten.co.jp/")
    assert (listing.price, listing.shipping, listing.in_stock) == (1280, None, True)
    assert (listing.units_per_pack, listing.unit_label) == (12, "roll")
    assert listing.last_polled_at is not None
    point = PricePoint.objects.get(listing=listing)
    assert (point.price, point.in_stock) == (1280, True)


def test_a_sold_out_rakuten_item_can_still_be_added(ichiba):
    ichiba.add("yasu-shop:tp-12r", price=1280, available=False)
    listing = add_listing("yasu-shop:tp-12r")
    assert listing.in_stock is False and listing.price == 1280


def test_a_demo_item_takes_units_and_category_from_the_catalogue():
    DemoProductFactory(item_code="tp-demo-12r", price=598, units_per_pack=12, unit_label="roll")
    listing = add_listing("tp-demo-12r")
    assert listing.source == "demo" and listing.price == 598
    assert (listing.units_per_pack, listing.unit_label, listing.category) == (
        12,
        "roll",
        "トイレットペーパー",
    )


def test_adding_a_listing_again_refreshes_it_instead_of_duplicating(ichiba):
    ichiba.add("yasu-shop:tp-12r", price=1280)
    first = add_listing(ITEM_URL)
    ichiba.add("yasu-shop:tp-12r", price=1180)
    again = add_listing("yasu-shop:tp-12r")
    assert again.pk == first.pk and again.price == 1180
    assert Listing.objects.count() == 1
    assert PricePoint.objects.filter(listing=first).count() == 2


# --- admin --------------------------------------------------------------------------------


def test_staff_add_a_listing_in_admin_by_url(ichiba, admin_client):
    ichiba.add("yasu-shop:tp-12r", price=1280)
    response = admin_client.post(
        reverse("admin:watches_listing_add"),
        {"code_or_url": ITEM_URL, "units_per_pack": "12", "unit_label": "roll", "category": ""},
    )
    listing = Listing.objects.get(item_code="yasu-shop:tp-12r")
    assert response.status_code == 302
    assert listing.name == "テスト商品 tp-12r" and listing.units_per_pack == 12


def test_staff_add_a_demo_listing_in_admin_by_code(admin_client):
    DemoProductFactory(item_code="dt-demo-2k", price=1298)
    response = admin_client.post(
        reverse("admin:watches_listing_add"), {"code_or_url": "dt-demo-2k"}
    )
    assert response.status_code == 302
    assert Listing.objects.get(item_code="dt-demo-2k").price == 1298


def test_the_admin_add_form_shows_the_intake_error(admin_client):
    response = admin_client.post(
        reverse("admin:watches_listing_add"),
        {"code_or_url": "https://www.amazon.co.jp/dp/B000000000"},
    )
    assert response.status_code == 200
    assert "cannot follow items on www.amazon.co.jp" in response.content.decode()
    assert not Listing.objects.exists()


def test_the_admin_add_form_refuses_a_listing_already_tracked(admin_client):
    ListingFactory(item_code="dt-demo-2k", name="アタック")
    response = admin_client.post(
        reverse("admin:watches_listing_add"), {"code_or_url": "dt-demo-2k"}
    )
    assert response.status_code == 200
    assert "already tracked" in response.content.decode()
    assert Listing.objects.count() == 1


def test_the_admin_add_page_asks_for_a_code_or_url(admin_client):
    response = admin_client.get(reverse("admin:watches_listing_add"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="code_or_url"' in page and 'name="item_code"' not in page


def test_the_admin_change_page_is_the_usual_one(admin_client):
    listing = ListingFactory()
    response = admin_client.get(reverse("admin:watches_listing_change", args=[listing.pk]))
    page = response.content.decode()
    assert 'name="item_code"' in page and 'name="code_or_url"' not in page


def test_a_misconfigured_marketplace_is_a_clear_error_not_a_crash(settings):
    settings.MARKETPLACE_ADAPTERS = {
        **settings.MARKETPLACE_ADAPTERS,
        "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
    }
    settings.RAKUTEN_APP_ID = ""  # the adapter refuses to start without one
    with pytest.raises(IntakeError) as caught:
        add_listing(ITEM_URL)
    assert caught.value.code == "unreachable"
