"""The product pages against the fake Yahoo! Shopping: add a product by its JAN code, see
every shop's offer (cheapest first, shipping unknown said so), the cheapest-offer chart, watch
it; search and home show "from ¥X at N shops". Bad input: a 4xx with the message next to the
field, nothing written."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import ListingFactory
from watches.models import Listing, Product, Trigger, Watch
from watches.products.intake import add_product

pytestmark = pytest.mark.django_db

JAN = "4901750404406"


@pytest.fixture
def shops(yahoo):
    for number, (price, shipping) in enumerate(
        [(620, 2), (520, 3), (550, 2), (505, 2), (700, 1)], start=1
    ):
        yahoo.add(f"store{number}_tp-12r", jan=JAN, price=price, shipping=shipping)
    return yahoo


@pytest.fixture
def product(shops):
    return add_product(JAN)


def field_error(response, name: str) -> str:
    return " ".join(str(e) for e in response.context["jan_form"].errors.get(name, []))


# --- add by JAN ------------------------------------------------------------------------------


def test_a_typed_jan_opens_its_product_page(client, shops):
    response = client.post("/products/add", {"jan": "４９０１７５０ ４０４４０６"})
    product = Product.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/products/{product.pk}/"
    assert Listing.objects.filter(product=product).count() == 5


@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("4901750404408", "last digit does not match"),
        ("490175040440", "13 or 8 digits"),
        ("4901-75O4-0440", "digits only"),
        ("", "Enter the JAN code"),
        ("4" * 65, "too long"),
    ],
)
def test_a_bad_jan_is_told_next_to_the_field_and_writes_nothing(client, shops, typed, words):
    response = client.post("/products/add", {"jan": typed})
    assert response.status_code == 400
    assert words in field_error(response, "jan")
    assert not Product.objects.exists() and shops.requests == []


def test_a_jan_no_shop_offers_is_a_404_with_the_message(client, shops):
    response = client.post("/products/add", {"jan": "4902102072618"})
    assert response.status_code == 404
    assert "No shop offers JAN 4902102072618" in field_error(response, "jan")
    assert not Product.objects.exists()


def test_a_marketplace_that_cannot_be_asked_is_a_503_with_the_message(client, shops):
    shops.behave[JAN] = "server"
    response = client.post("/products/add", {"jan": JAN})
    assert response.status_code == 503 and "Try again later" in field_error(response, "jan")
    assert not Product.objects.exists() and not Listing.objects.exists()


def test_adding_by_jan_needs_csrf(shops):
    response = Client(enforce_csrf_checks=True).post("/products/add", {"jan": JAN})
    assert response.status_code == 403 and not Product.objects.exists()


def test_a_get_of_the_add_url_goes_home(client):
    response = client.get("/products/add")
    assert response.status_code == 302 and response["Location"] == "/#add-jan"


def test_the_home_page_offers_the_jan_form_and_the_scanner(client):
    page = client.get("/").content.decode()
    assert 'action="/products/add"' in page and "data-scan" in page and "js/scan.js" in page


# --- the product page -----------------------------------------------------------------------


def test_the_page_lists_every_offer_cheapest_first(client, product):
    page = client.get(f"/products/{product.pk}/").content.decode()
    order = [page.index(f"ストア store{n}") for n in (4, 2, 3, 1, 5)]
    assert order == sorted(order)
    # After points: the cheapest shop's ¥505 gives 5 pt (the fake's 1 % back).
    assert "from ¥500 at 5 shops" in page
    assert "shipping unknown" in page and "free shipping" in page
    assert "<svg" in page or "No price history yet" in page


def test_a_product_watch_is_made_from_the_page(client, product):
    response = client.post(
        f"/products/{product.pk}/", {"trigger": Trigger.TARGET_PRICE, "target_price": "500"}
    )
    assert response.status_code == 302
    watch = Watch.objects.get()
    assert watch.product == product and watch.target_price == 500
    assert watch.listing.item_code == "store4_tp-12r"
    page = client.get(f"/products/{product.pk}/").content.decode()
    assert "You are watching this" in page


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"trigger": Trigger.TARGET_PRICE, "target_price": ""}, "target_price"),
        ({"trigger": Trigger.TARGET_PRICE, "target_price": "abc"}, "target_price"),
        ({"trigger": Trigger.TARGET_PRICE, "target_price": "-5"}, "target_price"),
        ({"trigger": Trigger.PRICE_DROP, "drop_percent": "95"}, "drop_percent"),
        ({"trigger": Trigger.LOWEST}, "trigger"),  # not offered for products
        ({"trigger": "nonsense"}, "trigger"),
    ],
)
def test_a_bad_watch_form_is_a_400_and_writes_nothing(client, product, data, field):
    response = client.post(f"/products/{product.pk}/", data)
    assert response.status_code == 400
    assert response.context["form"].errors[field]
    assert not Watch.objects.exists()


def test_an_unknown_product_is_a_404(client):
    assert client.get("/products/999999/").status_code == 404


def test_watching_needs_csrf(product):
    response = Client(enforce_csrf_checks=True).post(
        f"/products/{product.pk}/", {"trigger": Trigger.TARGET_PRICE, "target_price": "500"}
    )
    assert response.status_code == 403 and not Watch.objects.exists()


# --- from a listing, and in search ----------------------------------------------------------


def test_a_listing_whose_jan_is_known_leads_to_its_product(
    client, shops, django_capture_on_commit_callbacks
):
    listing = ListingFactory(source="rakuten", item_code="shop:tp", jan=JAN)
    page = client.get(f"/listings/{listing.pk}/").content.decode()
    assert f'action="/listings/{listing.pk}/product"' in page
    with django_capture_on_commit_callbacks(execute=True):  # its cached page goes stale on commit
        response = client.post(f"/listings/{listing.pk}/product")
    product = Product.objects.get()
    assert response["Location"] == f"/products/{product.pk}/"
    listing.refresh_from_db()
    assert listing.product == product
    page = client.get(f"/listings/{listing.pk}/").content.decode()
    assert f'href="/products/{product.pk}/"' in page


def test_a_listing_without_a_jan_says_so_and_makes_nothing(client, shops):
    listing = ListingFactory(source="rakuten", item_code="shop:tp")
    response = client.post(f"/listings/{listing.pk}/product")
    assert response.status_code == 400
    assert "JAN code, so its other shops cannot be found" in response.content.decode()
    assert not Product.objects.exists()


def test_search_shows_a_product_once_from_its_cheapest_offer(client, product):
    page = client.get("/", {"q": "テスト商品"}).content.decode()
    assert page.count(f'href="/products/{product.pk}/"') == 1
    assert "from ¥500 at 5 shops" in page, "¥505 − 5 pt"


def test_the_home_page_shows_the_offers_summary(client, product):
    page = client.get("/").content.decode()
    assert "from ¥500 at 5 shops" in page, "¥505 − 5 pt"


def test_watching_a_product_is_one_watch_per_trigger(client, product):
    for target in ("500", "480"):
        client.post(
            f"/products/{product.pk}/", {"trigger": Trigger.TARGET_PRICE, "target_price": target}
        )
    assert Watch.objects.get().target_price == 480


def test_the_product_pages_in_japanese_have_no_english_left(client, product):
    from django.core.management import call_command

    from tests.pages.test_i18n import english_left

    call_command("compile_translations")
    ja = {"accept-language": "ja"}
    body = client.get(f"/products/{product.pk}/", headers=ja).content.decode()
    assert "各ショップの価格" in body and english_left(body) == []
    refused = client.post("/products/add", {"jan": "4901750404408"}, headers=ja)
    assert "チェックデジット" in refused.content.decode()
    assert english_left(refused.content.decode()) == []


# --- my watches and editing a product watch -------------------------------------------------


def made_watch(client, product, **data):
    client.post(f"/products/{product.pk}/", {"trigger": Trigger.TARGET_PRICE, **data})
    return Watch.objects.get()


def test_my_watches_links_a_product_watch_to_its_product(client, product):
    made_watch(client, product, target_price="500")
    page = client.get("/watches/").content.decode()
    assert f'href="/products/{product.pk}/"' in page and "every shop" in page


def test_editing_a_product_watch_offers_the_product_triggers(client, product):
    watch = made_watch(client, product, target_price="500")
    page = client.get(f"/watches/{watch.pk}/edit/").content.decode()
    assert "Any shop at or below my price" in page and 'value="lowest"' not in page
    response = client.post(
        f"/watches/{watch.pk}/edit/", {"trigger": Trigger.TARGET_PRICE, "target_price": "480"}
    )
    assert response.status_code == 302
    watch.refresh_from_db()
    assert (watch.product, watch.target_price) == (product, 480)


def test_a_product_watch_cannot_be_edited_into_a_trigger_products_do_not_have(client, product):
    watch = made_watch(client, product, target_price="500")
    response = client.post(f"/watches/{watch.pk}/edit/", {"trigger": Trigger.LOWEST})
    assert response.status_code == 200 and response.context["form"].errors["trigger"]
    watch.refresh_from_db()
    assert watch.trigger == Trigger.TARGET_PRICE
