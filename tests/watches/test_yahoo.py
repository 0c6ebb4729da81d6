"""The Yahoo! Shopping adapter against a fake Item Search v3 API on 127.0.0.1, in both request
shapes (one item by code; every shop's offer of a JAN code): every outcome is classified to
its kind, shipping stays unknown unless the answer says free, and the dispatcher maps each
kind of a Yahoo listing's re-fetch to its outcome."""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest
import requests

from tests.fakes.yahoo import APP_ID
from watches.marketplaces.base import FetchError, FetchKind, Observation, Offers
from watches.marketplaces.ratelimit import RateLimiter, install_limiter
from watches.marketplaces.yahoo import YahooMarketplace

JAN = "4901750404406"
OTHER_JAN = "4902102072618"
CODE = "yasu-store_tp-12r"


def fetch_one(code: str = CODE):
    return YahooMarketplace().fetch([code])[code]


def offers_of(jan: str = JAN):
    return YahooMarketplace().offers([jan])[jan]


def five_shops(yahoo, prices=(620, 480, 550, 505, 700)) -> list[str]:
    codes = []
    for number, price in enumerate(prices, start=1):
        code = f"store{number}_tp-12r"
        yahoo.add(code, jan=JAN, price=price)
        codes.append(code)
    return codes


# --- one item by code ----------------------------------------------------------------------


def test_an_item_in_stock_is_an_observation_with_its_shop_and_links(yahoo):
    yahoo.add(CODE, jan=JAN, price=498)
    result = fetch_one()
    assert isinstance(result, Observation)
    assert (result.price, result.shipping, result.in_stock) == (498, 0, True)
    assert result.shop_name == "ストア yasu-store"
    assert result.url == "https://store.shopping.yahoo.co.jp/yasu-store/tp-12r.html"
    assert result.image_url.startswith("https://item-shopping.c.yimg.jp/")
    assert result.extra["jan"] == JAN


def test_one_item_is_asked_within_its_store_with_the_application_id(yahoo):
    yahoo.add(CODE)
    fetch_one()
    (query,) = yahoo.requests
    assert query["appid"] == APP_ID
    assert (query["seller_id"], query["query"]) == ("yasu-store", "tp-12r")


def test_an_item_out_of_stock_is_an_observation_out_of_stock(yahoo):
    yahoo.add(CODE, price=498, in_stock=False)
    result = fetch_one()
    assert result.in_stock is False and result.price == 498


def test_the_stores_other_items_do_not_answer_for_the_item(yahoo):
    yahoo.add("yasu-store_tp-12r-bulk", price=100)  # matches the query, is not the item
    assert fetch_one().kind == FetchKind.EMPTY


def test_a_code_that_is_not_store_item_is_not_found_without_asking(yahoo):
    assert fetch_one("no-underscore").kind == FetchKind.NOT_FOUND
    assert yahoo.requests == []


# --- shipping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shipping"),
    [
        (2, 0),  # 送料無料: free
        (1, None),  # 設定なし: unknown, not zero
        (3, None),  # 条件付き送料無料: depends on the order, unknown
    ],
)
def test_shipping_is_free_only_when_the_answer_says_so(yahoo, code, shipping):
    yahoo.add(CODE, price=498, shipping=code)
    result = fetch_one()
    assert result.shipping == shipping
    assert result.effective_price == 498


def test_an_offer_without_a_shipping_field_has_unknown_shipping(yahoo):
    hit = yahoo.add(CODE, price=498)
    del hit["shipping"]
    assert fetch_one().shipping is None


# --- every offer of a JAN code -------------------------------------------------------------


def test_a_jan_code_answers_every_shops_offer_cheapest_first_in_one_request(yahoo):
    five_shops(yahoo)
    yahoo.add("elsewhere_dt-2k", jan=OTHER_JAN, price=100)
    result = offers_of()
    assert isinstance(result, Offers)
    assert [offer.price for offer in result.offers] == [480, 505, 550, 620, 700]
    assert {offer.extra["jan"] for offer in result.offers} == {JAN}
    assert yahoo.asked_for_jan(JAN) == 1
    (query,) = yahoo.requests
    assert (query["sort"], query["results"]) == ("+price", "50")


def test_offers_are_compared_per_unit(yahoo):
    yahoo.add("a_tp-12r", jan=JAN, price=600, shipping=2)
    yahoo.add("b_tp-12r", jan=JAN, price=500, shipping=1)
    a, b = sorted(offers_of().offers, key=lambda offer: offer.item_code)
    assert a.unit_price(12) == Decimal("50.00") and b.unit_price(12) == Decimal("41.67")
    assert b.shipping is None  # its per-unit price is a floor: shipping is not known


def test_a_hit_naming_another_jan_is_not_an_offer_of_this_product(yahoo):
    yahoo.add("a_tp-12r", jan=JAN, price=600)
    yahoo.add("b_tp-12r", jan="", price=590)  # the store did not give its JAN code
    yahoo.add("c_dt-2k", jan=OTHER_JAN, price=1)
    yahoo.behave[JAN] = "loose"
    result = offers_of()
    assert {offer.item_code for offer in result.offers} == {"a_tp-12r", "b_tp-12r"}


def test_the_offers_asked_for_follow_the_setting(yahoo, settings):
    settings.YAHOO_OFFERS_PER_PRODUCT = 2
    five_shops(yahoo)
    assert [offer.price for offer in offers_of().offers] == [480, 505]


def test_a_jan_code_no_shop_offers_is_empty(yahoo):
    result = offers_of()
    assert isinstance(result, FetchError) and result.kind == FetchKind.EMPTY


def test_one_result_per_requested_jan_code(yahoo):
    five_shops(yahoo)
    yahoo.behave[OTHER_JAN] = "server"
    results = YahooMarketplace().offers([JAN, OTHER_JAN, JAN])
    assert set(results) == {JAN, OTHER_JAN}
    assert len(results[JAN].offers) == 5 and results[OTHER_JAN].kind == FetchKind.SERVER
    assert yahoo.asked_for_jan(JAN) == 1


# --- every error kind, in both shapes --------------------------------------------------------


SHAPES = [
    pytest.param(lambda: fetch_one(), CODE, id="item"),
    pytest.param(lambda: offers_of(), JAN, id="jan"),
]


@pytest.fixture
def stocked(yahoo):
    yahoo.add(CODE, jan=JAN, price=498)
    return yahoo


@pytest.mark.parametrize(("ask", "key"), SHAPES)
def test_429_is_rate_limited_with_the_servers_retry_after(stocked, ask, key):
    stocked.behave[key] = "rate_limited"
    stocked.retry_after = "120"
    result = ask()
    assert isinstance(result, FetchError) and result.kind == FetchKind.RATE_LIMITED
    assert result.retry_after == 120.0


@pytest.mark.parametrize(("ask", "key"), SHAPES)
def test_429_without_retry_after_is_rate_limited_without_a_delay(stocked, ask, key):
    stocked.behave[key] = "rate_limited"
    stocked.retry_after = None
    result = ask()
    assert result.kind == FetchKind.RATE_LIMITED and result.retry_after is None


@pytest.mark.parametrize(
    ("ask", "key", "behaviour", "kind"),
    [
        *[
            pytest.param(ask, key, behaviour, kind, id=f"{shape}-{behaviour}")
            for shape, ask, key in (
                ("item", lambda: fetch_one(), CODE),
                ("jan", lambda: offers_of(), JAN),
            )
            for behaviour, kind in (
                ("server", FetchKind.SERVER),
                ("maintenance", FetchKind.SERVER),
                ("stall", FetchKind.NETWORK),
                ("malformed", FetchKind.BAD_RESPONSE),
                ("missing_fields", FetchKind.BAD_RESPONSE),
                ("wrong_types", FetchKind.BAD_RESPONSE),
                ("empty", FetchKind.EMPTY),
                ("not_found", FetchKind.NOT_FOUND),
                ("bad_appid", FetchKind.CONFIG),
            )
        ]
    ],
)
def test_each_misbehaviour_is_classified(stocked, ask, key, behaviour, kind):
    stocked.behave[key] = behaviour
    result = ask()
    assert isinstance(result, FetchError) and result.kind == kind, result


def test_a_stall_is_a_timeout_and_never_shows_the_application_id(stocked):
    stocked.behave[CODE] = "stall"
    result = fetch_one()
    assert "timeout" in result.detail and APP_ID not in result.detail


def test_a_missing_field_is_named_in_the_detail(stocked):
    stocked.behave[JAN] = "missing_fields"
    assert "price" in offers_of().detail


def test_yahoos_error_message_is_kept_in_the_detail(stocked):
    stocked.behave[CODE] = "server"
    assert fetch_one().detail == "HTTP 500 Internal Server Error"


# --- configuration faults: Yahoo will not answer until a person acts --------------------------


def test_a_wrong_application_id_is_config_naming_the_setting(stocked, settings):
    settings.YAHOO_APP_ID = "not-the-right-one"
    result = fetch_one()
    assert result.kind == FetchKind.CONFIG and not result.kind.transient
    assert "set YAHOO_APP_ID" in result.detail
    assert "HTTP 403 Your Request was Forbidden" in result.detail  # the gateway's XML, read
    assert "not-the-right-one" not in result.detail


def test_an_error_that_echoes_the_request_never_keeps_our_appid(stocked):
    stocked.behave[JAN] = "echoing_gateway"
    result = offers_of()
    assert result.kind == FetchKind.SERVER and "upstream failed" in result.detail
    assert APP_ID not in result.detail and "[our key]" in result.detail


def test_the_json_form_of_a_refused_appid_is_read_too(stocked):
    stocked.behave[JAN] = "bad_appid"
    result = offers_of()
    assert result.kind == FetchKind.CONFIG and "HTTP 403 Invalid appid" in result.detail


def test_a_refused_appid_names_the_daily_limit_that_answers_the_same_403(stocked):
    stocked.behave[JAN] = "bad_appid"
    result = offers_of()
    assert "YAHOO_APP_ID" in result.detail and "50,000 requests a day" in result.detail


def test_the_default_budget_spends_at_most_the_requests_yahoo_allows_in_a_day(tmp_path):
    from tests.test_site_url import settings_in_a_fresh_process

    env = {"YAHOO_RATE_PER_SECOND": ""}
    rate = float(settings_in_a_fresh_process(tmp_path, "settings.YAHOO_RATE_PER_SECOND", **env))
    assert rate > 0.5 and rate * 86_400 <= 50_000


def test_an_application_id_lost_on_the_way_is_config(stocked):
    adapter = YahooMarketplace()
    adapter.app_id = ""  # what reaches Yahoo: an empty appid
    result = adapter.fetch([CODE])[CODE]
    assert result.kind == FetchKind.CONFIG and "YAHOO_APP_ID" in result.detail
    assert "Authentication parameters" in result.detail


def test_after_a_config_fault_the_rest_of_the_batch_is_not_asked(stocked, settings):
    stocked.add("yasu-store_dt-2k", jan=OTHER_JAN)
    settings.YAHOO_APP_ID = "not-the-right-one"
    results = YahooMarketplace().offers([JAN, OTHER_JAN])
    assert len(stocked.requests) == 1
    assert results[OTHER_JAN] == results[JAN] and results[JAN].kind == FetchKind.CONFIG


def test_offers_per_product_above_one_requests_answer_stop_start_up(tmp_path):
    from tests.demo.test_demo_app import environment, run

    result = run(environment(tmp_path, YAHOO_OFFERS_PER_PRODUCT="51"), "manage.py", "check")
    assert result.returncode != 0
    assert "YAHOO_OFFERS_PER_PRODUCT must be at most 50" in result.stderr


def test_a_refused_connection_is_network(yahoo, settings):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.YAHOO_API_URL = f"http://127.0.0.1:{port}/"
    assert fetch_one().kind == FetchKind.NETWORK
    assert offers_of().kind == FetchKind.NETWORK


@pytest.mark.parametrize(
    "override",
    [
        {"price": -1},
        {"price": True},
        {"inStock": 1},
        {"name": None},
        {"code": None},
        {"shipping": "free"},
        {"seller": {"sellerId": "yasu-store", "name": 5}},
    ],
)
def test_other_invalid_hits_are_bad_response(yahoo, override):
    yahoo.add(CODE, jan=JAN)
    yahoo.set(CODE, **override)
    assert offers_of().kind == FetchKind.BAD_RESPONSE
    if "code" not in override:  # a hit without its code cannot answer for an item
        assert fetch_one().kind == FetchKind.BAD_RESPONSE


def test_unsafe_links_from_the_api_are_not_kept(yahoo):
    yahoo.add(CODE, url="javascript:alert(1)", image={"medium": "http://plain.test/a.jpg"})
    result = fetch_one()
    assert result.url == "" and result.image_url == ""


# --- its own rate limit ------------------------------------------------------------------------


def test_after_a_429_the_rest_of_the_batch_is_not_asked(stocked, settings):
    stocked.add("yasu-store_dt-2k", jan=OTHER_JAN)
    stocked.behave[JAN] = "rate_limited"
    stocked.retry_after = "60"
    results = YahooMarketplace().offers([JAN, OTHER_JAN])
    assert results[OTHER_JAN].kind == FetchKind.RATE_LIMITED
    # The budget's first slot after the 60 s: on its grid, within one interval of them.
    assert 0 < results[OTHER_JAN].retry_after <= 60 + 1 / settings.YAHOO_RATE_PER_SECOND
    assert stocked.asked_for_jan(OTHER_JAN) == 0


def test_yahoo_has_its_own_limiter_keyed_by_its_application_id(stocked, settings):
    clock = [0.0]
    slept: list[float] = []
    limiter = RateLimiter(1.0, clock=lambda: clock[0], sleep=slept.append)
    install_limiter(f"yahoo:{APP_ID}", settings.YAHOO_RATE_PER_SECOND, limiter)
    adapter = YahooMarketplace()
    assert adapter.limiter is limiter
    adapter.offers([JAN, OTHER_JAN])
    assert slept == [1.0]  # the second request waited its slot


def test_the_fake_refuses_what_goes_over_an_appids_allowance_in_one_second(stocked):
    """As the real one counts it: three requests sent at once fall in at most two wall-clock
    seconds, so at least one is over an allowance of one a second."""
    stocked.per_second = 1
    query = {"appid": APP_ID, "jan_code": JAN, "results": "1"}
    statuses = [requests.get(stocked.url, params=query, timeout=5).status_code for _ in range(3)]
    assert 429 in statuses and stocked.too_many == statuses.count(429)


# --- registration ----------------------------------------------------------------------------


def test_yahoo_is_registered_when_an_application_id_is_set_and_then_no_demo_runs():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.MARKETPLACE_ADAPTERS))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "yasugoro.settings", "YAHOO_APP_ID": "x"}
    for name in ("DEMO_MARKET", "DEBUG", "RAKUTEN_APP_ID"):
        env.pop(name, None)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == {"yahoo": "watches.marketplaces.yahoo.YahooMarketplace"}
