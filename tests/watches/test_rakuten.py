"""The Rakuten Ichiba adapter against a fake Item Search API on 127.0.0.1 that checks what the
real one checks: every outcome is classified to its kind — a configuration fault to `config`,
its detail naming what to fix —, start-up refuses an application id without its key, and the
dispatcher maps each kind to its outcome and reason."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.enqueue import enqueue
from outbox.models import Outbox, Reason, Status
from tests.demo.test_demo_app import environment
from tests.demo.test_demo_app import run as run_python
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.ichiba import ACCESS_KEY, APP_ID, BASE_PATH
from watches.marketplaces.base import FetchError, FetchKind, Observation, get_marketplace
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.ratelimit import app_id_label

CODE = "yasu-shop:tp-12r"
OTHER = "yasu-shop:dt-2k"


def fetch_one(code: str = CODE):
    return RakutenMarketplace().fetch([code])[code]


# --- classification -----------------------------------------------------------------------


def test_an_available_item_is_an_observation_in_stock(ichiba):
    ichiba.add(CODE, price=1280)
    result = fetch_one()
    assert isinstance(result, Observation)
    assert (result.price, result.shipping, result.in_stock) == (1280, 0, True)
    assert result.name == "テスト商品 tp-12r"
    assert result.url == "https://item.rakuten.co.jp/yasu-shop/tp-12r/"
    assert result.image_url.startswith("https://thumbnail.image.rakuten.co.jp/")
    assert result.shop_name == "ショップ yasu-shop"


def test_the_request_asks_by_item_code_with_the_application_id(ichiba):
    ichiba.add(CODE)
    fetch_one()
    (query,) = ichiba.requests
    assert query["applicationId"] == APP_ID
    assert query["itemCode"] == CODE
    assert query["formatVersion"] == "2"


def test_the_request_goes_to_the_configured_version_with_the_key_in_a_header(ichiba, settings):
    ichiba.add(CODE)
    settings.RAKUTEN_API_VERSION = "20260401"
    assert isinstance(fetch_one(), Observation)
    (request,) = ichiba.received
    assert request.path == f"{BASE_PATH}/20260401"
    assert request.header("accessKey") == ACCESS_KEY
    # Never in the URL: a URL ends up in logs.
    assert ACCESS_KEY not in str(request.query) and "accessKey" not in request.query


def test_the_default_version_is_the_latest_documented(settings):
    assert settings.RAKUTEN_API_VERSION == "20260701"
    assert (
        settings.RAKUTEN_API_URL == "https://openapi.rakuten.co.jp/ichibams/api/IchibaItem/Search"
    )


def test_the_site_url_goes_as_origin_and_referer(ichiba, settings):
    ichiba.add(CODE)
    ichiba.sites = {"https://yasugoro.example"}  # registered as a web application
    settings.RAKUTEN_SITE_URL = "https://yasugoro.example/"
    assert isinstance(fetch_one(), Observation)
    (request,) = ichiba.received
    assert request.header("Origin") == "https://yasugoro.example"
    assert request.header("Referer") == "https://yasugoro.example/"


def test_without_a_site_url_no_origin_is_sent(ichiba):
    ichiba.add(CODE)
    fetch_one()
    (request,) = ichiba.received
    assert request.header("Origin") is None and request.header("Referer") is None


def test_a_price_sent_as_a_string_of_digits_is_that_number(ichiba):
    ichiba.add(CODE, itemPrice="3290")
    result = fetch_one()
    assert isinstance(result, Observation) and result.price == 3290


def test_the_fakes_string_price_behaviour_reads_as_the_number(ichiba):
    ichiba.add(CODE, price=1280)
    ichiba.behave[CODE] = "string_price"
    assert fetch_one().price == 1280


# --- configuration faults: the marketplace will not answer until a person acts ---------------

LABEL = app_id_label(APP_ID)


def assert_config(result, *words: str) -> None:
    assert isinstance(result, FetchError) and result.kind == FetchKind.CONFIG, result
    assert not result.kind.transient
    for word in words:
        assert word in result.detail, result.detail
    assert APP_ID not in result.detail and ACCESS_KEY not in result.detail


def test_a_retired_version_is_config_naming_the_version_setting(ichiba, settings):
    settings.RAKUTEN_API_VERSION = "20220601"  # retired on the new host on 2026-08-18
    assert_config(fetch_one(), "RAKUTEN_API_VERSION", "20220601", "API Configuration not found")


def test_a_wrong_access_key_is_config_naming_the_key_setting(ichiba, settings):
    settings.RAKUTEN_ACCESS_KEY = "pk_not-the-right-one"
    result = fetch_one()
    assert_config(result, "RAKUTEN_ACCESS_KEY", f"#{LABEL}", "Invalid Access Key")
    assert "pk_not-the-right-one" not in result.detail


def test_a_key_lost_on_the_way_is_config_naming_the_key_setting(ichiba):
    adapter = RakutenMarketplace()
    adapter.keys[APP_ID] = ""  # what reaches Rakuten: an empty accessKey
    result = adapter.fetch([CODE])[CODE]
    assert_config(result, "RAKUTEN_ACCESS_KEY", "accessKey must be present")


def test_an_unknown_application_id_is_config_naming_the_id_setting(ichiba, settings):
    settings.RAKUTEN_APP_ID = "not-the-right-one"
    result = fetch_one()
    assert_config(result, "RAKUTEN_APP_ID", app_id_label("not-the-right-one"), "applicationId")
    assert "not-the-right-one" not in result.detail


def test_a_refusal_that_echoes_the_request_never_keeps_our_application_id(ichiba, settings):
    ichiba.behave[CODE] = "echoing_gateway"
    result = fetch_one()
    assert isinstance(result, FetchError) and "Access Denied" in result.detail
    assert settings.RAKUTEN_APP_ID not in result.detail and "[our key]" in result.detail


def test_a_401_is_config(ichiba):
    ichiba.behave[CODE] = "unauthorized"
    assert_config(fetch_one(), "RAKUTEN_ACCESS_KEY", "HTTP 401")


def test_a_web_application_without_its_site_is_config_naming_the_site_setting(ichiba):
    ichiba.sites = {"https://yasugoro.example"}
    assert_config(fetch_one(), "RAKUTEN_SITE_URL", "HTTP_REFERRER_MISSING")


def test_a_site_not_registered_is_config_naming_the_site_setting(ichiba, settings):
    ichiba.sites = {"https://yasugoro.example"}
    settings.RAKUTEN_SITE_URL = "https://elsewhere.example/"
    assert_config(fetch_one(), "RAKUTEN_SITE_URL", "HTTP_REFERRER_NOT_ALLOWED")


def test_an_ip_address_not_allowed_is_config_naming_the_registration(ichiba):
    ichiba.allowed_ips = {"203.0.113.7"}  # a backend registration, another server's address
    assert_config(fetch_one(), "IP address", "Rakuten Developers", "CLIENT_IP_NOT_ALLOWED")


def test_after_a_config_fault_the_rest_of_the_batch_is_not_asked(ichiba, settings):
    ichiba.add(CODE)
    ichiba.add(OTHER)
    settings.RAKUTEN_API_VERSION = "20220601"
    results = RakutenMarketplace().fetch([CODE, OTHER])
    assert len(ichiba.requests) == 1
    assert results[OTHER] == results[CODE]
    assert results[OTHER].kind == FetchKind.CONFIG


def test_the_next_batch_asks_again(ichiba, settings):
    """A configuration fault stops one batch, not the adapter: once fixed, it answers."""
    ichiba.add(CODE)
    settings.RAKUTEN_API_VERSION = "20220601"
    assert fetch_one().kind == FetchKind.CONFIG
    ichiba.versions.add("20220601")  # as if the operator had set a version Rakuten knows
    assert isinstance(fetch_one(), Observation)


def test_the_gateways_error_shape_is_read(ichiba):
    ichiba.behave[CODE] = "unauthorized"
    result = fetch_one()
    assert "HTTP 401 401: Unauthorized" in result.detail


def test_shipping_is_unknown_when_postage_is_extra(ichiba):
    ichiba.add(CODE, postageFlag=1)
    assert fetch_one().shipping is None


def test_availability_zero_is_an_observation_out_of_stock(ichiba):
    ichiba.add(CODE, price=990, available=False)
    result = fetch_one()
    assert isinstance(result, Observation)
    assert result.in_stock is False and result.price == 990


def test_count_zero_is_empty(ichiba):
    ichiba.add(CODE)
    ichiba.behave[CODE] = "empty"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.EMPTY


def test_an_unknown_code_answered_with_no_items_is_empty(ichiba):
    result = fetch_one("nobody:nothing")
    assert isinstance(result, FetchError) and result.kind == FetchKind.EMPTY


def test_404_is_not_found(ichiba):
    ichiba.behave[CODE] = "not_found"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.NOT_FOUND


def test_429_is_rate_limited_with_the_servers_retry_after(ichiba):
    ichiba.behave[CODE] = "rate_limited"
    ichiba.retry_after = "120"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.RATE_LIMITED
    assert result.retry_after == 120.0


def test_429_without_retry_after_is_rate_limited_without_a_delay(ichiba):
    ichiba.behave[CODE] = "rate_limited"
    ichiba.retry_after = None
    result = fetch_one()
    assert result.kind == FetchKind.RATE_LIMITED and result.retry_after is None


def test_after_a_429_the_rest_of_the_batch_is_not_asked(ichiba, settings):
    ichiba.add(OTHER)
    ichiba.behave[CODE] = "rate_limited"
    ichiba.retry_after = "60"
    results = RakutenMarketplace().fetch([CODE, OTHER])
    assert results[OTHER].kind == FetchKind.RATE_LIMITED
    # The budget's first slot after the 60 s: on its grid, within one interval of them.
    assert 0 < results[OTHER].retry_after <= 60 + 1 / settings.RAKUTEN_RATE_PER_SECOND
    assert ichiba.asked(OTHER) == 0


def test_500_is_server(ichiba):
    ichiba.behave[CODE] = "server"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.SERVER


def test_503_is_server(ichiba):
    ichiba.behave[CODE] = "unavailable"
    assert fetch_one().kind == FetchKind.SERVER


def test_a_stall_past_the_read_timeout_is_network(ichiba):
    ichiba.behave[CODE] = "stall"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.NETWORK
    assert "timeout" in result.detail


def test_a_refused_connection_is_network(ichiba, settings):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.RAKUTEN_API_URL = f"http://127.0.0.1:{port}/"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.NETWORK


def test_the_application_id_never_appears_in_an_error_detail(ichiba, settings):
    ichiba.behave[CODE] = "stall"
    assert APP_ID not in fetch_one().detail


def test_malformed_json_is_bad_response(ichiba):
    ichiba.behave[CODE] = "malformed"
    result = fetch_one()
    assert isinstance(result, FetchError) and result.kind == FetchKind.BAD_RESPONSE


def test_a_missing_field_is_bad_response(ichiba):
    ichiba.add(CODE)
    ichiba.behave[CODE] = "missing_fields"
    result = fetch_one()
    assert result.kind == FetchKind.BAD_RESPONSE and "itemPrice" in result.detail


def test_a_wrong_type_is_bad_response(ichiba):
    ichiba.add(CODE)
    ichiba.behave[CODE] = "wrong_types"
    result = fetch_one()
    assert result.kind == FetchKind.BAD_RESPONSE and "itemPrice" in result.detail


@pytest.mark.parametrize(
    "item_override",
    [
        {"availability": 2},
        {"availability": True},
        {"itemPrice": -1},
        {"itemName": None},
        {"mediumImageUrls": [{"imageUrl": "https://x.test/a.jpg"}]},  # formatVersion=1 shape
    ],
)
def test_other_invalid_items_are_bad_response(ichiba, item_override):
    ichiba.add(CODE, **item_override)
    assert fetch_one().kind == FetchKind.BAD_RESPONSE


def test_an_answer_about_another_item_is_bad_response(ichiba):
    ichiba.items[CODE] = ichiba.add(OTHER)  # asked for CODE, answered OTHER
    assert fetch_one().kind == FetchKind.BAD_RESPONSE


def test_400_wrong_parameter_is_bad_response_not_not_found(ichiba):
    ichiba.behave[CODE] = "wrong_parameter"
    result = fetch_one()
    assert result.kind == FetchKind.BAD_RESPONSE
    assert result.detail == "HTTP 400 wrong_parameter: itemCode is not valid"


def test_unsafe_links_from_the_api_are_not_kept(ichiba):
    ichiba.add(CODE, itemUrl="javascript:alert(1)", mediumImageUrls=["http://plain.test/a.jpg"])
    result = fetch_one()
    assert result.url == "" and result.image_url == ""


def test_one_result_per_requested_code_in_one_batch(ichiba):
    ichiba.add(CODE, price=500)
    ichiba.behave[OTHER] = "server"
    results = RakutenMarketplace().fetch([CODE, OTHER, CODE])
    assert set(results) == {CODE, OTHER}
    assert results[CODE].price == 500 and results[OTHER].kind == FetchKind.SERVER
    assert ichiba.asked(CODE) == 1


# --- registration -------------------------------------------------------------------------


def test_rakuten_is_not_a_marketplace_without_an_application_id(settings):
    assert "rakuten" not in settings.MARKETPLACE_ADAPTERS
    with pytest.raises(LookupError):
        get_marketplace("rakuten")


def test_rakuten_is_registered_when_an_application_id_is_set():
    code = (
        "import django, json; django.setup(); from django.conf import settings; "
        "print(json.dumps(settings.MARKETPLACE_ADAPTERS))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "yasugoro.settings",
        "RAKUTEN_APP_ID": "x",
        "RAKUTEN_ACCESS_KEY": "pk_x",
    }
    env.pop("DEMO_MARKET", None)  # set for the test process by the test settings
    env.pop("DEBUG", None)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True
    )
    adapters = json.loads(out.stdout)
    assert adapters["rakuten"] == "watches.marketplaces.rakuten.RakutenMarketplace"
    # A production with a real marketplace runs no demo (tests/demo/test_demo_app.py).
    assert "demo" not in adapters


# Start-up (settings load: `manage.py check`, the web server, the workers) refuses what would
# fail every request, naming the variable to set and never echoing an id or a key.
@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"RAKUTEN_APP_ID": "an-id"},
            "RAKUTEN_APP_ID is set without its access key: set RAKUTEN_ACCESS_KEY",
        ),
        (
            {"RAKUTEN_APP_IDS": "one-id:pk_one,two-id"},
            "RAKUTEN_APP_IDS: application 2 has no access key; write each application as id:key",
        ),
        (
            {"RAKUTEN_APP_IDS": "one-id:pk_one", "RAKUTEN_APP_ID": "an-id"},
            "RAKUTEN_APP_ID is not one of RAKUTEN_APP_IDS",
        ),
        (
            {"RAKUTEN_ACCESS_KEY": "pk_orphan"},
            "RAKUTEN_ACCESS_KEY is set without RAKUTEN_APP_ID",
        ),
        (
            {"RAKUTEN_API_VERSION": "latest"},
            "RAKUTEN_API_VERSION must be a date of eight digits",
        ),
        (
            {"RAKUTEN_API_URL": "https://app.rakuten.co.jp/services/api/IchibaItem/Search"},
            "app.rakuten.co.jp, which stopped answering on 2026-05-14",
        ),
        (
            {
                "RAKUTEN_API_URL": "https://openapi.rakuten.co.jp/ichibams/api/IchibaItem/Search/20260401"
            },
            "RAKUTEN_API_URL ends in a version",
        ),
        ({"RAKUTEN_SITE_URL": "yasugoro.example"}, "RAKUTEN_SITE_URL must be an http(s) URL"),
    ],
)
def test_start_up_refuses_what_would_fail_every_request(tmp_path, variables, message):
    result = run_python(environment(tmp_path, **variables), "manage.py", "check")
    assert result.returncode != 0
    assert message in result.stderr
    for value in ("an-id", "one-id", "two-id", "pk_one", "pk_orphan"):
        assert value not in result.stderr


def test_start_up_accepts_an_id_with_its_key(tmp_path):
    variables = {"RAKUTEN_APP_ID": "an-id", "RAKUTEN_ACCESS_KEY": "pk_an-id"}
    result = run_python(environment(tmp_path, **variables), "manage.py", "check")
    assert result.returncode == 0, result.stderr


def test_the_adapter_refuses_an_id_without_its_key(ichiba, settings):
    from django.core.exceptions import ImproperlyConfigured

    settings.RAKUTEN_APP_IDS = [APP_ID, "second-id"]
    settings.RAKUTEN_ACCESS_KEYS = {APP_ID: ACCESS_KEY}
    with pytest.raises(ImproperlyConfigured, match="RAKUTEN_ACCESS_KEY") as refused:
        RakutenMarketplace()
    assert "second-id" not in str(refused.value)


# --- the dispatcher and a Rakuten re-fetch (each kind: tests/outbox/test_refetch_outcomes.py) ---


@pytest.fixture
def pending_row(ichiba):
    """A rakuten listing at ¥900, a watch for ¥1000 or less, and its pending outbox row."""
    listing = ListingFactory(source="rakuten", item_code=CODE, price=900, units_per_pack=None)
    watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=1000)
    assert enqueue(watch, timezone.now(), {"line": "1000", "price": 900})
    return Outbox.objects.get(watch=watch)


@pytest.mark.django_db
def test_the_dispatcher_drops_an_item_that_sold_out(ichiba, recording_channel, pending_row):
    ichiba.add(CODE, price=900, available=False)
    run_cycle()
    pending_row.refresh_from_db()
    assert (pending_row.status, pending_row.reason) == (Status.DROPPED, Reason.OUT_OF_STOCK)


@pytest.mark.django_db
def test_the_dispatcher_drops_condition_lost_on_a_higher_rakuten_price(
    ichiba, recording_channel, pending_row
):
    ichiba.add(CODE, price=1200)
    run_cycle()
    pending_row.refresh_from_db()
    assert (pending_row.status, pending_row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
