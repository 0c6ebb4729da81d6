"""The product pages against the fake Yahoo! Shopping: add a product by its JAN code, see
every shop's offer (cheapest first, shipping unknown said so), the cheapest-offer chart, watch
it; search and home show "from ¥X at N shops". Bad input: a 4xx with the message next to the
field, nothing written."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client

from outbox.models import Outbox
from tests.factories import ListingFactory, WatchFactory, device_with_cookie
from watches.models import Channel, Listing, Product, Trigger, Watch
from watches.polling.poll import poll
from watches.products.intake import add_product
from watches.products.polling import poll_products

pytestmark = pytest.mark.django_db

JAN = "4901750404406"
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)  # 18:00 in Tokyo


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(START, tick=False)
    return time_machine


def poll_at(clock, minutes: int):
    clock.move_to(START + dt.timedelta(minutes=minutes), tick=False)
    return poll_products(force=True)


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


def test_every_offer_is_priced_per_unit_on_the_products_pack(client):
    """An offer tracked by its link keeps its own pack size when it joins a product: its card
    is priced per unit on the product's pack, as its watches judge it (decision 0084); its own
    page on its own."""
    product = Product.objects.create(
        jan=JAN, name="スコッティ 12ロール", units_per_pack=12, unit_label="roll"
    )
    own = ListingFactory(price=600, shipping=0, points=0, units_per_pack=6, unit_label="roll")
    Listing.objects.filter(pk=own.pk).update(product=product, jan=JAN)  # as `offer_listing` does
    page = " ".join(
        re.sub(r"<[^>]+>", " ", client.get(f"/products/{product.pk}/").content.decode()).split()
    )
    assert "(12 in this pack)" in page  # the watch form
    assert "¥50 per roll" in page  # ¥600 / 12
    assert "¥100 per roll" not in page
    assert "¥100 per roll" in client.get(f"/listings/{own.pk}/").content.decode()


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


def test_restoring_a_product_watch_never_makes_a_second_live_watch_of_its_trigger(
    client, clock, product, shops
):
    """The clash is sought on the product, not on the offer the old watch followed: restored
    beside a newer watch following another offer, it would make two, and one drop told twice."""
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    url = f"/products/{product.pk}/"
    client.post(url, {"trigger": Trigger.TARGET_PRICE, "target_price": "500"})
    first = Watch.objects.get()
    assert first.listing.item_code == "store4_tp-12r"  # the best offer then
    client.post(f"/watches/{first.pk}/remove")
    # Another shop becomes the cheapest; the person watches the product again.
    shops.set("store3_tp-12r", price=480)
    poll_at(clock, 20)
    client.post(url, {"trigger": Trigger.TARGET_PRICE, "target_price": "500"})
    second = Watch.live.get()
    assert second.pk != first.pk and second.listing.item_code == "store3_tp-12r"
    # The undo of the old removal (its form stays usable on My watches).
    response = client.post(f"/watches/{first.pk}/restore", follow=True)
    assert "You are already watching that item this way" in response.content.decode()

    live = Watch.live.filter(device=device, product=product, trigger=Trigger.TARGET_PRICE)
    shops.set("store3_tp-12r", price=470)
    poll_at(clock, 40)
    assert (live.count(), Outbox.objects.filter(device=device).count()) == (1, 1)


def test_restoring_a_listing_watch_is_not_refused_for_a_product_watch_following_that_listing(
    client, product
):
    """A product watch following the same offer is another watch: refusing the undo with "You
    are already watching that item this way" would not be true."""
    device_with_cookie(client, channel=Channel.CONSOLE)
    offer = Listing.objects.get(item_code="store4_tp-12r")
    client.post(f"/listings/{offer.pk}/", {"trigger": "target_price", "target_price": "500"})
    own = Watch.objects.get(product=None)
    client.post(f"/watches/{own.pk}/remove")
    client.post(f"/products/{product.pk}/", {"trigger": "target_price", "target_price": "450"})
    assert Watch.live.get().listing == offer  # the product watch follows the same offer

    client.post(f"/watches/{own.pk}/restore")
    own.refresh_from_db()
    assert own.removed_at is None


def test_a_failed_check_is_not_shown_as_the_time_an_offer_was_checked(
    client, clock, product, shops
):
    """A failed ask still moves `last_polled_at` (its turn in the queue): the page says the
    check failed, never "Checked <then>" over the price an earlier check saw."""
    clock.move_to(START + dt.timedelta(days=3), tick=False)
    shops.behave[JAN] = "server"
    shops.behave["store4_tp-12r"] = "server"
    poll_products(force=True)
    poll(codes=["store4_tp-12r"])
    product.refresh_from_db()
    offer = Listing.objects.get(item_code="store4_tp-12r")
    assert product.last_error and offer.last_error

    body = client.get(f"/products/{product.pk}/").content.decode()
    assert "Checked Dec 4, 18:00" not in body and "Every shop last checked" not in body
    assert "Check failed Dec 4, 18:00: the price is from an earlier check" in body
    assert "The last check of every shop, Dec 4, 18:00, failed" in body
    assert body.count("Checked Dec 1, 18:00") == 4  # the other shops' own checks


def test_my_watches_tells_a_product_watch_per_unit_on_the_products_pack(client):
    """The offer a product watch follows joined with its own pack size (6): My watches shows
    the watch's target and the price now per unit on the product's pack (12), as detection
    judges and the message tells it."""
    product = Product.objects.create(
        jan=JAN, name="スコッティ 12ロール", units_per_pack=12, unit_label="roll"
    )
    own = ListingFactory(price=600, shipping=0, points=0, units_per_pack=6, unit_label="roll")
    Listing.objects.filter(pk=own.pk).update(product=product, jan=JAN)
    device, _ = device_with_cookie(client)
    WatchFactory(
        device=device,
        listing=own,
        product=product,
        target_price=55,
        use_unit_price=True,
    )
    page = " ".join(re.sub(r"<[^>]+>", " ", client.get("/watches/").content.decode()).split())
    assert "¥55 per roll" in page
    assert "¥50 per roll" in page  # ¥600 / 12: at or below the line
    assert "¥100 per roll" not in page
