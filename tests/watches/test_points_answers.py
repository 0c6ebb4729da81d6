"""The points in a marketplace's answer, read from the fakes over real HTTP: Rakuten's
`pointRate` with its window (open, ended, not yet started, empty, malformed) and `taxFlag`,
Yahoo's `point` object — each read right, or refused as `bad_response` with a detail that
names the field (docs/marketplaces.md, "Points")."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine

from watches.marketplaces.base import Ask, FetchError, FetchKind, Observation, Page, Shape
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.yahoo import YahooMarketplace

JST = zoneinfo.ZoneInfo("Asia/Tokyo")
NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=JST)
CODE = "yasu-shop:tp-12r"
HIT = "store1_tp-12r"


def rakuten_at(ichiba, at: dt.datetime = NOW):
    with time_machine.travel(at, tick=False):
        return RakutenMarketplace().fetch([CODE])[CODE]


# --- Rakuten Ichiba ------------------------------------------------------------------------


def test_the_standard_multiplier_gives_one_point_per_100_yen_without_the_tax(ichiba):
    ichiba.add(CODE, price=1980)  # ¥1,800 before the 10 % tax
    result = rakuten_at(ichiba)
    assert isinstance(result, Observation)
    assert (result.points, result.point_rate, result.points_until) == (18, None, None)
    assert result.net_price == 1980 - 18


def test_an_open_window_counts_its_multiplier_until_its_last_minute(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 5, "2026-03-13 19:00", "2026-03-19 13:59")
    result = rakuten_at(ichiba)
    assert (result.points, result.point_rate) == (90, 5)
    # "13:59" is its last minute: it holds until 14:00, Japan time.
    assert result.points_until == dt.datetime(2026, 3, 19, 14, 0, tzinfo=JST)
    assert result.points_after == 18
    assert (result.shipping, result.net_price) == (0, 1890)


@pytest.mark.parametrize(
    ("at", "points"),
    [
        (dt.datetime(2026, 3, 19, 13, 59, 59, tzinfo=JST), 90),
        (dt.datetime(2026, 3, 19, 14, 0, tzinfo=JST), 18),
    ],
    ids=["last-second", "after-its-end"],
)
def test_the_window_ends_after_the_minute_it_names(ichiba, at, points):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 5, "2026-03-13 19:00", "2026-03-19 13:59")
    assert rakuten_at(ichiba, at).points == points


def test_a_window_that_has_ended_counts_the_standard_points(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 5, "2026-03-01 00:00", "2026-03-14 23:59")
    result = rakuten_at(ichiba)
    assert (result.points, result.point_rate, result.points_until) == (18, None, None)


def test_a_window_not_yet_started_counts_the_standard_points(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 10, "2026-03-16 00:00", "2026-03-20 23:59")
    result = rakuten_at(ichiba)
    assert (result.points, result.point_rate, result.points_until) == (18, None, None)


def test_empty_window_times_are_no_window(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 1, "", "")
    assert rakuten_at(ichiba).points == 18


def test_a_multiplier_without_a_window_counts_with_no_end_known(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 3, "", "")
    result = rakuten_at(ichiba)
    assert (result.points, result.point_rate, result.points_until) == (54, 3, None)


def test_a_tax_excluded_price_earns_points_on_itself(ichiba):
    ichiba.add(CODE, price=1800, taxFlag=1)
    assert rakuten_at(ichiba).points == 18


def test_the_multiplier_may_come_as_a_string_of_digits(ichiba):
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, "5", "2026-03-13 19:00", "2026-03-19 13:59")
    assert rakuten_at(ichiba).points == 90


def test_shipping_extra_stays_unknown_and_is_never_taken_for_free(ichiba):
    ichiba.add(CODE, price=1780, postageFlag=1)
    result = rakuten_at(ichiba)
    assert result.shipping is None
    assert result.net_price == 1780 - 16, "no shipping added, none assumed free either"


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        (
            {"pointRateEndTime": "2026/03/19 13:59", "pointRateStartTime": ""},
            "pointRateEndTime must be 'YYYY-MM-DD HH:MM' (Japan time) or empty, "
            "got '2026/03/19 13:59'",
        ),
        (
            {"pointRateStartTime": "2026-13-40 25:00"},
            "pointRateStartTime must be 'YYYY-MM-DD HH:MM' (Japan time) or empty",
        ),
        ({"pointRateStartTime": 20260313}, "pointRateStartTime must be str, got int"),
        (
            {"pointRateStartTime": "2026-03-19 13:59", "pointRateEndTime": "2026-03-13 19:00"},
            "pointRateEndTime is before pointRateStartTime",
        ),
        ({"pointRate": "5倍"}, "pointRate must be a multiplier from 0 to 100, got '5倍'"),
        ({"pointRate": -1}, "pointRate must be a multiplier from 0 to 100, got -1"),
        ({"pointRate": 1.5}, "pointRate must be a multiplier from 0 to 100, got 1.5"),
        ({"pointRate": True}, "pointRate must be a multiplier from 0 to 100, got True"),
        ({"taxFlag": 2}, "taxFlag must be 0 or 1, got 2"),
    ],
    ids=[
        "slashed-date",
        "impossible-date",
        "number-for-a-time",
        "end-before-start",
        "words-for-a-rate",
        "negative-rate",
        "fractional-rate",
        "boolean-rate",
        "unknown-tax-flag",
    ],
)
def test_malformed_points_are_a_bad_response_naming_the_field(ichiba, changes, detail):
    ichiba.add(CODE, price=1980, **changes)
    result = rakuten_at(ichiba)
    assert isinstance(result, FetchError)
    assert result.kind == FetchKind.BAD_RESPONSE
    assert result.detail.startswith(detail), result.detail


def test_an_item_with_a_malformed_window_is_left_out_of_its_page_and_counted(ichiba):
    ichiba.add("yasu-shop:a", price=500)
    ichiba.add("yasu-shop:b", price=600, pointRateEndTime="tomorrow")
    with time_machine.travel(NOW, tick=False):
        page = RakutenMarketplace().pages([Ask(Shape.SHOP, "yasu-shop")])
    [result] = page.values()
    assert isinstance(result, Page), result
    assert [item.item_code for item in result.items] == ["yasu-shop:a"]
    assert result.unread == 1


def test_a_page_whose_only_item_has_a_malformed_window_is_bad_response(ichiba):
    ichiba.add("yasu-shop:b", price=600, pointRateEndTime="tomorrow")
    with time_machine.travel(NOW, tick=False):
        page = RakutenMarketplace().pages([Ask(Shape.SHOP, "yasu-shop")])
    [result] = page.values()
    assert isinstance(result, FetchError) and result.kind == FetchKind.BAD_RESPONSE
    assert "pointRateEndTime" in result.detail


# --- Yahoo! Shopping -----------------------------------------------------------------------


def yahoo_now(yahoo):
    with time_machine.travel(NOW, tick=False):
        return YahooMarketplace().fetch([HIT])[HIT]


def test_everyones_points_add_up_and_their_multiplier_is_kept_for_words(yahoo):
    yahoo.add(HIT, price=1980)
    yahoo.points(
        HIT, amount=0, times=0, lyLimitedBonusAmount=90, lyLimitedBonusTimes=5, bonusAmount=0
    )
    result = yahoo_now(yahoo)
    assert (result.points, result.point_rate, result.member_points) == (90, 5, 0)
    assert result.points_until is None, "Yahoo answers no window"
    assert result.net_price == 1890


def test_premium_figures_are_members_only_and_only_what_exceeds_everyones(yahoo):
    yahoo.add(HIT, price=1980)
    yahoo.points(HIT, amount=0, lyLimitedBonusAmount=20, lyLimitedPremiumBonusAmount=100)
    result = yahoo_now(yahoo)
    assert (result.points, result.member_points) == (20, 80)
    assert result.net_price == 1960, "members' points are not counted for everyone"


def test_a_hit_without_a_point_object_gives_none(yahoo):
    yahoo.add(HIT, price=1980)
    yahoo.set(HIT, point=None)
    assert yahoo_now(yahoo).points == 0


@pytest.mark.parametrize(
    ("point", "detail"),
    [
        ("90", "point must be dict, got str"),
        ({"amount": "12"}, "point.amount must be int, got str"),
        ({"lyLimitedBonusAmount": 9.5}, "point.lyLimitedBonusAmount must be int, got float"),
        ({"premiumAmount": -3}, "point.premiumAmount must not be negative, got -3"),
    ],
    ids=["string", "string-amount", "fractional-amount", "negative"],
)
def test_a_malformed_point_object_is_a_bad_response_naming_the_field(yahoo, point, detail):
    yahoo.add(HIT, price=1980)
    yahoo.set(HIT, point=point)
    result = yahoo_now(yahoo)
    assert isinstance(result, FetchError) and result.kind == FetchKind.BAD_RESPONSE
    assert result.detail == detail
