"""Many prices a request: every page shape of each adapter against its fake marketplace on
127.0.0.1 (a catalogue whose update stamp moves with every price or stock change). A page
holds every item of the answer, known to us or not, in the answer's order; an ask the
marketplace would refuse costs no request; a configuration fault stops the rest of a batch;
Rakuten answers every shop's offer of a JAN code, so product watches work there too."""

from __future__ import annotations

import datetime as dt

import pytest
import requests
import time_machine

from tests.factories import ListingFactory
from tests.fakes.ichiba import ACCESS_KEY
from tests.fakes.ichiba import APP_ID as RAKUTEN_APP_ID
from tests.fakes.yahoo import APP_ID as YAHOO_APP_ID
from watches.marketplaces.base import (
    Ask,
    FetchError,
    FetchKind,
    Offers,
    Page,
    PageSearch,
    Shape,
    get_marketplace,
)
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.ratelimit import RateLimiter, install_limiter
from watches.marketplaces.yahoo import YahooMarketplace
from watches.models import Listing, Product

JAN = "4901750404406"
OTHER_JAN = "4902102072618"


def page_of(adapter: PageSearch, shape: Shape, key: str, page: int = 1):
    ask = Ask(shape, key, page)
    return adapter.pages([ask])[ask]


def codes(page: Page) -> list[str]:
    return [item.item_code for item in page.items]


# --- Rakuten Ichiba --------------------------------------------------------------------------


@pytest.fixture
def shop(ichiba):
    """A shop of 40 items (prices 1000…1390, added in order), two of them sold out."""
    for n in range(40):
        ichiba.add(f"yasu-shop:item-{n:02}", price=1000 + 10 * n, available=n not in (5, 6))
    ichiba.add("other-shop:item-00", price=500)
    return ichiba


def test_rakuten_answers_the_shapes_with_their_documented_limits():
    assert RakutenMarketplace.per_page == 30 and RakutenMarketplace.max_page == 100
    assert RakutenMarketplace.shapes == frozenset(Shape)
    assert RakutenMarketplace.shop_by_update is True


def test_a_shop_page_is_its_most_recently_updated_items_sold_out_ones_too(shop):
    shop.set("yasu-shop:item-03", price=880)
    shop.set("yasu-shop:item-05", available=True)
    shop.set("yasu-shop:item-01", price=990)
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop")
    assert isinstance(result, Page)
    assert codes(result)[:4] == [
        "yasu-shop:item-01",
        "yasu-shop:item-05",
        "yasu-shop:item-03",
        "yasu-shop:item-39",
    ]
    assert len(result.items) == 30 and (result.total, result.last_page) == (40, 2)
    by_code = {item.item_code: item for item in result.items}
    assert by_code["yasu-shop:item-01"].price == 990
    assert by_code["yasu-shop:item-05"].in_stock is True
    (query,) = shop.requests
    assert query["shopCode"] == "yasu-shop" and query["sort"] == "-updateTimestamp"
    assert (query["hits"], query["page"], query["availability"]) == ("30", "1", "0")


def test_a_shops_second_page_holds_the_rest_with_its_sold_out_items(shop):
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop", page=2)
    assert len(result.items) == 10
    sold_out = [item.item_code for item in result.items if not item.in_stock]
    assert sold_out == ["yasu-shop:item-06", "yasu-shop:item-05"]


def test_each_item_of_a_page_names_its_shop_and_no_update_time(shop):
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop")
    assert {item.extra["shop"] for item in result.items} == {"yasu-shop"}
    # Rakuten's answer carries no update time: the adapter invents none.
    assert all("updated_at" not in item.extra for item in result.items)


def test_a_product_page_is_every_shops_offer_in_stock_cheapest_first(ichiba):
    for shop, price in (("a", 620), ("b", 480), ("c", 550), ("d", 505)):
        ichiba.add(f"{shop}:tp-12r", price=price, jan=JAN)
    ichiba.add("e:tp-12r", price=300, jan=JAN, available=False)
    ichiba.add("f:dt-2k", price=100, jan=OTHER_JAN)
    result = page_of(RakutenMarketplace(), Shape.PRODUCT, JAN)
    assert [item.price for item in result.items] == [480, 505, 550, 620]
    assert all(item.in_stock for item in result.items)
    (query,) = ichiba.requests
    assert (query["keyword"], query["sort"], query["availability"]) == (JAN, "+itemPrice", "1")


def test_a_keyword_page_is_cheapest_first(ichiba):
    ichiba.add("a:1", price=900, itemName="スコッティ ティッシュ 5箱")
    ichiba.add("b:2", price=700, itemName="スコッティ ティッシュ 10箱")
    ichiba.add("c:3", price=100, itemName="クリネックス")
    result = page_of(RakutenMarketplace(), Shape.KEYWORD, "スコッティ ティッシュ")
    assert codes(result) == ["b:2", "a:1"]
    assert ichiba.requests[0]["keyword"] == "スコッティ ティッシュ"


def test_an_item_page_is_that_item(shop):
    result = page_of(RakutenMarketplace(), Shape.ITEM, "yasu-shop:item-05")
    assert codes(result) == ["yasu-shop:item-05"] and result.items[0].in_stock is False


@pytest.mark.django_db
def test_a_page_carries_items_we_know_and_items_we_do_not(shop):
    known = ListingFactory(source="rakuten", item_code="yasu-shop:item-39")
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop")
    # Every item of the answer: which ones to store is the caller's choice, not the adapter's.
    assert known.item_code in codes(result) and len(result.items) == 30
    assert Listing.objects.count() == 1


def test_string_prices_on_a_page_read_as_numbers(shop):
    shop.behave["yasu-shop"] = "string_price"
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop")
    assert sorted(item.price for item in result.items)[0] == 1100


def test_a_malformed_page_is_bad_response(shop):
    shop.behave["yasu-shop"] = "wrong_types"
    result = page_of(RakutenMarketplace(), Shape.SHOP, "yasu-shop")
    assert result.kind == FetchKind.BAD_RESPONSE and "itemPrice" in result.detail


def test_a_shop_without_items_is_a_page_without_items(ichiba):
    result = page_of(RakutenMarketplace(), Shape.SHOP, "nobody")
    assert isinstance(result, Page) and result.items == () and result.total == 0


@pytest.mark.parametrize(
    ("ask", "kind"),
    [
        (Ask(Shape.SHOP, "yasu-shop", 101), FetchKind.EMPTY),  # page ≤ 100
        (Ask(Shape.SHOP, "yasu-shop", 0), FetchKind.EMPTY),
        (Ask(Shape.KEYWORD, "  "), FetchKind.NOT_FOUND),
    ],
)
def test_an_ask_rakuten_would_refuse_costs_no_request(ichiba, ask, kind):
    result = RakutenMarketplace().pages([ask])[ask]
    assert isinstance(result, FetchError) and result.kind == kind
    assert ichiba.requests == []


def test_pages_take_one_request_each_through_the_budget(shop, settings):
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(1.0, clock=lambda: now[0], sleep=sleep)
    install_limiter(f"rakuten:{RAKUTEN_APP_ID}", settings.RAKUTEN_RATE_PER_SECOND, limiter)
    asks = [Ask(Shape.SHOP, "yasu-shop", page) for page in (1, 2)] + [Ask(Shape.ITEM, "x:y")]
    results = RakutenMarketplace().pages([*asks, asks[0]])
    assert list(results) == asks and len(shop.requests) == 3
    assert slept == [1.0, 1.0]


def test_a_config_fault_stops_the_rest_of_the_pages(shop, settings):
    settings.RAKUTEN_ACCESS_KEY = "pk_wrong"
    asks = [Ask(Shape.SHOP, "yasu-shop"), Ask(Shape.PRODUCT, JAN), Ask(Shape.KEYWORD, "x")]
    results = RakutenMarketplace().pages(asks)
    assert len(shop.requests) == 1
    assert {results[ask] for ask in asks} == {results[asks[0]]}
    assert results[asks[0]].kind == FetchKind.CONFIG
    assert "RAKUTEN_ACCESS_KEY" in results[asks[0]].detail


def test_the_shop_of_an_item_code(ichiba):
    adapter = RakutenMarketplace()
    assert adapter.shop_of("yasu-shop:item-01") == "yasu-shop"
    assert adapter.shop_of("no-colon") is None and adapter.shop_of(":x") is None


# --- Rakuten's offers: product watches across shops -------------------------------------------


def test_rakuten_answers_every_shops_offer_of_a_jan_code(ichiba):
    ichiba.add("a:tp-12r", price=620, jan=JAN)
    ichiba.add("b:tp-12r", price=480, jan=JAN)
    ichiba.add("c:tp-12r", price=300, jan=JAN, available=False)
    result = RakutenMarketplace().offers([JAN])[JAN]
    assert isinstance(result, Offers)
    assert [(offer.item_code, offer.price) for offer in result.offers] == [
        ("b:tp-12r", 480),
        ("a:tp-12r", 620),
    ]


def test_a_jan_code_no_rakuten_shop_offers_in_stock_is_empty(ichiba):
    ichiba.add("c:tp-12r", price=300, jan=JAN, available=False)
    assert RakutenMarketplace().offers([JAN])[JAN].kind == FetchKind.EMPTY


@pytest.mark.django_db
def test_a_product_gathers_its_rakuten_offers_and_polls_them(ichiba):
    from watches.products.intake import add_product
    from watches.products.polling import poll_products

    ichiba.add("a:tp-12r", price=620, jan=JAN, itemName="スコッティ 12ロール")
    ichiba.add("b:tp-12r", price=480, jan=JAN, itemName="スコッティ 12ロール")
    start = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
    with time_machine.travel(start, tick=False):
        product = add_product(JAN)
    offers = Listing.objects.filter(product=product, source="rakuten").order_by("price")
    assert [(o.item_code, o.price) for o in offers] == [("b:tp-12r", 480), ("a:tp-12r", 620)]
    ichiba.set("a:tp-12r", price=450)
    with time_machine.travel(start + dt.timedelta(minutes=30), tick=False):
        poll_products(force=True)
    assert Listing.objects.get(item_code="a:tp-12r").price == 450
    assert Product.objects.get(pk=product.pk).last_error == ""


@pytest.mark.django_db
def test_an_offer_beyond_a_popular_products_page_is_not_taken_for_gone(ichiba):
    """31 shops offer the JAN code in stock: its page holds the 30 cheapest. The dearest, an
    offer we know, is not on it — yet in stock: never marked out of stock for that (its
    watchers would be told it came back when it never left), asked for alone instead. A
    cheaper offer missing from the page of a product whose page holds them all is gone."""
    from watches.products.intake import add_product
    from watches.products.polling import poll_products

    for n in range(31):
        ichiba.add(f"s{n:02}:tp-12r", price=400 + 10 * n, jan=JAN, itemName="スコッティ 12ロール")
    start = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
    with time_machine.travel(start, tick=False):
        product = add_product(JAN)
    dearest = Listing.objects.create(
        source="rakuten",
        item_code="s30:tp-12r",
        product=product,
        jan=JAN,
        price=700,
        in_stock=True,
        last_polled_at=start,
    )
    with time_machine.travel(start + dt.timedelta(minutes=30), tick=False):
        poll_products(force=True)
    dearest.refresh_from_db()
    assert (dearest.in_stock, dearest.price, dearest.last_polled_at) == (True, 700, start)
    assert dearest.beyond_product_page

    for n in range(2, 31):  # now the page holds every offer in stock: the dearest again
        ichiba.set(f"s{n:02}:tp-12r", available=n >= 29)
    with time_machine.travel(start + dt.timedelta(minutes=60), tick=False):
        poll_products(force=True)
    dearest.refresh_from_db()
    assert not dearest.beyond_product_page and dearest.in_stock
    gone = Listing.objects.get(item_code="s05:tp-12r")
    assert gone.in_stock is False, "the page holds them all: what it lacks is gone"


# --- Yahoo! Shopping --------------------------------------------------------------------------


@pytest.fixture
def store(yahoo):
    """A store of 60 items: prices 500…1090, review counts rising with the code's number."""
    for n in range(60):
        yahoo.add(
            f"yasu-store_item-{n:02}", price=500 + 10 * n, reviews=n, jan=JAN if n < 3 else ""
        )
    yahoo.add("other-store_item-00", price=100, jan=JAN)
    return yahoo


def test_yahoo_answers_the_shapes_with_their_documented_limits():
    assert YahooMarketplace.per_page == 50 and YahooMarketplace.max_page == 20
    assert YahooMarketplace.shapes == frozenset(Shape)
    assert YahooMarketplace.shop_by_update is False


def test_a_yahoo_store_page_is_its_items_by_review_count(store):
    result = page_of(YahooMarketplace(), Shape.SHOP, "yasu-store")
    assert isinstance(result, Page)
    assert codes(result)[:2] == ["yasu-store_item-59", "yasu-store_item-58"]
    assert len(result.items) == 50 and (result.total, result.last_page) == (60, 2)
    assert {item.extra["shop"] for item in result.items} == {"yasu-store"}
    (query,) = store.requests
    assert (query["seller_id"], query["sort"]) == ("yasu-store", "-review_count")
    assert (query["start"], query["results"]) == ("1", "50")


def test_a_yahoo_stores_second_page_starts_after_the_first(store):
    result = page_of(YahooMarketplace(), Shape.SHOP, "yasu-store", page=2)
    assert codes(result)[0] == "yasu-store_item-09" and len(result.items) == 10
    assert store.requests[0]["start"] == "51"


def test_a_yahoo_product_page_is_every_offer_in_stock_cheapest_first(store):
    store.set("yasu-store_item-01", inStock=False)
    result = page_of(YahooMarketplace(), Shape.PRODUCT, JAN)
    assert codes(result) == ["other-store_item-00", "yasu-store_item-00", "yasu-store_item-02"]
    assert {item.extra["jan"] for item in result.items} == {JAN}
    (query,) = store.requests
    assert (query["jan_code"], query["sort"], query["in_stock"]) == (JAN, "+price", "true")


def test_a_yahoo_keyword_page_is_cheapest_first(yahoo):
    yahoo.add("a_1", price=900, name="スコッティ ティッシュ 5箱")
    yahoo.add("b_2", price=700, name="スコッティ ティッシュ 10箱")
    yahoo.add("c_3", price=100, name="クリネックス")
    result = page_of(YahooMarketplace(), Shape.KEYWORD, "スコッティ ティッシュ")
    assert codes(result) == ["b_2", "a_1"]
    assert "jan" not in result.items[0].extra  # the answer names none


def test_a_yahoo_item_page_holds_the_item_and_its_stores_namesakes(store):
    result = page_of(YahooMarketplace(), Shape.ITEM, "yasu-store_item-0")
    assert "yasu-store_item-01" in codes(result)
    assert store.requests[0]["query"] == "item-0"


def test_the_last_yahoo_page_stays_inside_the_thousand_results_window(yahoo):
    for n in range(1000):
        yahoo.add(f"big_item-{n:04}", price=1000 + n, reviews=1000 - n)
    result = page_of(YahooMarketplace(), Shape.SHOP, "big", page=20)
    (query,) = yahoo.requests
    assert (query["start"], query["results"]) == ("951", "49")
    assert len(result.items) == 49 and result.last_page == 20


def test_a_yahoo_page_past_the_window_costs_no_request(yahoo):
    ask = Ask(Shape.SHOP, "big", 21)
    assert YahooMarketplace().pages([ask])[ask].kind == FetchKind.EMPTY
    assert yahoo.requests == []


def test_a_config_fault_stops_the_rest_of_the_yahoo_pages(store, settings):
    settings.YAHOO_APP_ID = "not-the-right-one"
    asks = [Ask(Shape.SHOP, "yasu-store"), Ask(Shape.PRODUCT, JAN)]
    results = YahooMarketplace().pages(asks)
    assert len(store.requests) == 1 and results[asks[1]] == results[asks[0]]
    assert results[asks[0]].kind == FetchKind.CONFIG


# --- the fakes refuse what the real services refuse ------------------------------------------


@pytest.mark.parametrize(
    ("params", "description"),
    [
        ({"hits": "31"}, "hits is not valid"),
        ({"page": "101"}, "page is not valid"),
        ({"sort": "-updated"}, "sort is not valid"),
    ],
)
def test_the_fake_ichiba_refuses_parameters_out_of_range(ichiba, params, description):
    query = {"applicationId": RAKUTEN_APP_ID, "formatVersion": "2", "shopCode": "s", **params}
    answer = requests.get(
        f"{ichiba.url}/20260701", params=query, headers={"accessKey": ACCESS_KEY}, timeout=5
    )
    assert answer.status_code == 400
    assert answer.json() == {"error": "wrong_parameter", "error_description": description}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"results": "51"}, "results must be 1 to 50"),
        ({"start": "952", "results": "50"}, "start + results must be 1000 or less"),
    ],
)
def test_the_fake_yahoo_refuses_results_out_of_range(yahoo, params, message):
    query = {"appid": YAHOO_APP_ID, "seller_id": "s", **params}
    answer = requests.get(yahoo.url, params=query, timeout=5)
    assert answer.status_code == 400 and answer.json() == {"Error": {"Message": message}}


@pytest.mark.parametrize("source", ["rakuten", "yahoo"])
def test_both_marketplaces_search_by_page(request, settings, source):
    request.getfixturevalue({"rakuten": "ichiba", "yahoo": "yahoo"}[source])
    adapter = get_marketplace(source)
    assert callable(adapter.pages) and callable(adapter.shop_of)
    assert isinstance(adapter.per_page, int) and adapter.max_page >= 20
