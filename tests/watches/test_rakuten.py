"""The Rakuten Ichiba adapter against a fake Item Search API on 127.0.0.1: every outcome is
classified to its kind, and the dispatcher maps each kind to its outcome and reason."""

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
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.ichiba import APP_ID
from watches.marketplaces.base import FetchError, FetchKind, Observation, get_marketplace
from watches.marketplaces.rakuten import RakutenMarketplace

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


def test_after_a_429_the_rest_of_the_batch_is_not_asked(ichiba):
    ichiba.add(OTHER)
    ichiba.behave[CODE] = "rate_limited"
    ichiba.retry_after = "60"
    results = RakutenMarketplace().fetch([CODE, OTHER])
    assert results[OTHER].kind == FetchKind.RATE_LIMITED
    assert 0 < results[OTHER].retry_after <= 60
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
    assert fetch_one().kind == FetchKind.BAD_RESPONSE


def test_a_wrong_application_id_is_bad_response(ichiba, settings):
    settings.RAKUTEN_APP_ID = "not-the-right-one"
    ichiba.add(CODE)
    result = fetch_one()
    assert result.kind == FetchKind.BAD_RESPONSE and "wrong_parameter" in result.detail


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
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "yasugoro.settings", "RAKUTEN_APP_ID": "x"}
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
