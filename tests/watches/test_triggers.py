"""The four triggers' pure detect/recheck functions, on hand-built histories."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from watches.marketplaces.base import Observation
from watches.models import Trigger, Watch
from watches.triggers import (
    ALREADY_NOTIFIED,
    CONDITION_LOST,
    OUT_OF_STOCK,
    POINTS_ENDED,
    Point,
    build_history,
    detect,
    recheck,
)

NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def obs(price: int | None, shipping: int | None = 0, in_stock: bool = True) -> Observation:
    return Observation(
        item_code="x", price=price, shipping=shipping, in_stock=in_stock, observed_at=NOW
    )


def daily(*prices: int | None, end: dt.datetime = NOW, in_stock: bool = True) -> list[Point]:
    """One point a day, the last one a day before `end`; None is a day out of stock."""
    count = len(prices)
    return [
        Point(end - (count - i) * DAY, price, in_stock and price is not None)
        for i, price in enumerate(prices)
    ]


def history(points: list[Point]):
    return build_history(points, NOW)


def watch(trigger: str = Trigger.TARGET_PRICE, **fields) -> Watch:
    fields.setdefault("created_at", NOW - 200 * DAY)
    return Watch(trigger=trigger, **fields)


FLAT_1000 = daily(*[1000] * 30)


# --- target_price -------------------------------------------------------------------------


def test_target_holds_exactly_at_the_target():
    judgement = detect(watch(target_price=1000), None, obs(1000), history(FLAT_1000))
    assert judgement.holds
    assert judgement.value == Decimal(1000) and judgement.line == Decimal(1000)


def test_target_does_not_hold_one_yen_above():
    judgement = detect(watch(target_price=1000), None, obs(1001), history(FLAT_1000))
    assert not judgement.holds and judgement.reason == CONDITION_LOST


def test_target_compares_price_plus_shipping():
    w = watch(target_price=1000)
    assert not detect(w, None, obs(950, shipping=100), history([])).holds
    assert detect(w, None, obs(900, shipping=100), history([])).holds


def test_target_takes_unknown_shipping_as_none_added():
    judgement = detect(watch(target_price=1000), None, obs(1000, shipping=None), history([]))
    assert judgement.holds and judgement.value == Decimal(1000)


def test_target_compares_unit_price_exactly_at_target():
    w = watch(target_price=50, use_unit_price=True)
    judgement = detect(w, 12, obs(600), history([]))
    assert judgement.holds and judgement.value == Decimal("50.00")


def test_target_unit_price_includes_shipping():
    w = watch(target_price=50, use_unit_price=True)
    judgement = detect(w, 12, obs(540, shipping=72), history([]))
    assert not judgement.holds and judgement.value == Decimal("51.00")


def test_unit_price_a_hair_above_the_target_does_not_hold():
    # ¥12,501 for 250 g is ¥50.004/g: rounding to the nearest sen would call it ¥50.00.
    w = watch(target_price=50, use_unit_price=True)
    judgement = detect(w, 250, obs(12501), history([]))
    assert not judgement.holds and judgement.value == Decimal("50.01")


def test_unit_price_is_not_used_when_the_listing_has_no_units():
    w = watch(target_price=50, use_unit_price=True)
    judgement = detect(w, None, obs(600), history([]))
    assert not judgement.holds and judgement.value == Decimal(600)


def test_unit_price_after_points_is_the_price_after_points_per_unit():
    """A target-price watch per unit and after points judges (price + shipping − points) /
    units: ¥600 + ¥24 shipping − 24 pt is ¥600, ¥50.00 a roll, at the line; one point fewer
    is ¥50.09 (rounded up), above it. Without the points the same offer is ¥52.00."""
    w = watch(target_price=50, use_unit_price=True, after_points=True)
    sale = Observation(
        item_code="x", price=600, shipping=24, in_stock=True, observed_at=NOW, points=24
    )
    judgement = detect(w, 12, sale, history([]))
    assert judgement.holds and judgement.value == Decimal("50.00")
    assert judgement.points == 24 and judgement.line == Decimal(50)
    fewer = Observation(
        item_code="x", price=600, shipping=24, in_stock=True, observed_at=NOW, points=23
    )
    judgement = detect(w, 12, fewer, history([]))
    assert not judgement.holds and judgement.value == Decimal("50.09")
    sticker = watch(target_price=50, use_unit_price=True, after_points=False)
    judgement = detect(sticker, 12, sale, history([]))
    assert not judgement.holds and judgement.value == Decimal("52.00")
    assert judgement.points == 0


def test_unit_price_after_points_counts_member_points_only_for_a_member():
    w = watch(target_price=50, use_unit_price=True, after_points=True)
    offer = Observation(
        item_code="x", price=624, in_stock=True, observed_at=NOW, shipping=0, member_points=24
    )
    assert detect(w, 12, offer, history([])).value == Decimal("52.00")
    judgement = detect(w, 12, offer, history([]), members=True)
    assert judgement.holds and judgement.value == Decimal("50.00")


def test_recheck_of_a_unit_watch_after_points_judges_the_fresh_unit_price_after_points():
    w = watch(target_price=50, use_unit_price=True, after_points=True)
    snapshot = {"line": "50", "points_counted": 24}
    still = Observation(item_code="x", price=624, in_stock=True, observed_at=NOW, points=24)
    judgement = recheck(w, 12, still, snapshot, DETECTED)
    assert judgement.holds and judgement.value == Decimal("50.00")
    # The campaign ended: ¥624 − 6 pt is ¥51.50 a roll, and with the points the detection
    # counted it would still hold.
    ended = Observation(item_code="x", price=624, in_stock=True, observed_at=NOW, points=6)
    judgement = recheck(w, 12, ended, snapshot, DETECTED)
    assert not judgement.holds and judgement.reason == POINTS_ENDED
    assert judgement.value == Decimal("51.50")


def test_out_of_stock_never_fires():
    judgement = detect(watch(target_price=1000), None, obs(500, in_stock=False), history([]))
    assert not judgement.holds and judgement.reason == OUT_OF_STOCK


def test_no_target_never_fires():
    assert not detect(watch(target_price=None), None, obs(1), history([])).holds


# --- price_drop ---------------------------------------------------------------------------


def test_price_drop_holds_exactly_n_percent_below_typical():
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    judgement = detect(w, None, obs(850), history(FLAT_1000))
    assert judgement.holds and judgement.line == Decimal(850)


def test_price_drop_does_not_hold_just_short_of_n_percent():
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    assert not detect(w, None, obs(851), history(FLAT_1000)).holds


def test_price_drop_defaults_to_15_percent():
    w = watch(Trigger.PRICE_DROP, drop_percent=None)
    assert detect(w, None, obs(850), history(FLAT_1000)).holds
    assert not detect(w, None, obs(851), history(FLAT_1000)).holds


def test_price_drop_with_the_watchers_percent():
    w = watch(Trigger.PRICE_DROP, drop_percent=10)
    assert detect(w, None, obs(900), history(FLAT_1000)).holds
    assert not detect(w, None, obs(901), history(FLAT_1000)).holds


def test_price_drop_line_is_exact_on_an_odd_typical_price():
    # Typical ¥999: 15 % below is ¥849.15; ¥849 holds, ¥850 does not.
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    points = daily(*[999] * 30)
    assert detect(w, None, obs(849), history(points)).line == Decimal("849.15")
    assert detect(w, None, obs(849), history(points)).holds
    assert not detect(w, None, obs(850), history(points)).holds


def test_typical_is_the_median_of_the_last_30_days_only():
    old = daily(*[2000] * 30, end=NOW - 30 * DAY)
    recent = daily(*([1000] * 20 + [1200] * 10))
    built = history(old + recent)
    assert built.typical == Decimal(1000)


def test_typical_is_the_mean_of_the_two_middle_prices_on_an_even_split():
    built = history(daily(*([1000] * 15 + [1100] * 15)))
    assert built.typical == Decimal(1050)


def test_typical_weighs_prices_by_how_long_they_held():
    # 29 days at ¥1000, then a day of frequent ¥1200 samples: more rows, less time.
    points = daily(*[1000] * 30)[:-1]
    day_start = NOW - DAY
    points += [Point(day_start + i * dt.timedelta(minutes=15), 1200, True) for i in range(96)]
    built = history(points)
    assert built.typical == Decimal(1000)


def test_typical_leaves_out_of_stock_time():
    built = history(daily(*([None] * 20 + [1000] * 10)))
    assert built.typical == Decimal(1000)


def test_price_drop_compares_effective_price_with_shipping():
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    assert not detect(w, None, obs(800, shipping=100), history(FLAT_1000)).holds
    assert detect(w, None, obs(750, shipping=100), history(FLAT_1000)).holds


def test_price_drop_without_history_does_not_fire():
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    judgement = detect(w, None, obs(1), history([]))
    assert not judgement.holds and judgement.line is None


# --- lowest -------------------------------------------------------------------------------


def test_lowest_needs_14_days_of_history():
    w = watch(Trigger.LOWEST)
    thirteen = daily(*[1000] * 13)
    fourteen = daily(*[1000] * 14)
    assert not detect(w, None, obs(900), history(thirteen)).holds
    assert detect(w, None, obs(900), history(fourteen)).holds


def test_lowest_holds_at_the_90_day_low_and_not_above():
    w = watch(Trigger.LOWEST)
    points = daily(*([1000] * 40 + [880] + [1000] * 40))
    assert detect(w, None, obs(880), history(points)).holds
    assert not detect(w, None, obs(881), history(points)).holds


def test_lowest_looks_back_90_days_only():
    w = watch(Trigger.LOWEST)
    points = daily(*([500] + [1000] * 99))  # ¥500 was 100 days ago
    assert history(points).low_90 == 1000
    assert detect(w, None, obs(990), history(points)).holds


def test_lowest_ignores_prices_seen_out_of_stock():
    w = watch(Trigger.LOWEST)
    points = [*FLAT_1000, Point(NOW - dt.timedelta(hours=1), 500, False)]
    assert detect(w, None, obs(990), history(points)).holds


# --- back_in_stock ------------------------------------------------------------------------


def test_back_in_stock_fires_when_out_at_the_previous_observation():
    w = watch(Trigger.BACK_IN_STOCK)
    points = daily(1000, 1000, None)
    assert detect(w, None, obs(1000), history(points)).holds


def test_back_in_stock_does_not_fire_when_in_stock_all_along():
    w = watch(Trigger.BACK_IN_STOCK)
    judgement = detect(w, None, obs(1000), history(daily(1000, 1000, 1000)))
    assert not judgement.holds and judgement.reason == CONDITION_LOST


def test_back_in_stock_fires_when_a_refetch_saw_the_restock_first():
    # Out, then an in-stock point written by the dispatcher's re-fetch, then this poll.
    w = watch(Trigger.BACK_IN_STOCK, created_at=NOW - 10 * DAY)
    points = daily(1000, None, None, 1000)
    assert detect(w, None, obs(1000), history(points)).holds


def test_back_in_stock_ignores_stock_outs_over_before_the_watch_began():
    w = watch(Trigger.BACK_IN_STOCK, created_at=NOW - 2 * DAY)
    points = daily(None, None, 1000, 1000, 1000)  # back in stock 3 days ago
    assert not detect(w, None, obs(1000), history(points)).holds


def test_back_in_stock_counts_a_stock_out_under_way_when_the_watch_began():
    w = watch(Trigger.BACK_IN_STOCK, created_at=NOW - dt.timedelta(hours=12))
    points = daily(1000, None)  # out since a day ago, before the watch; no point since
    assert detect(w, None, obs(1000), history(points)).holds


def test_back_in_stock_with_a_target_waits_for_the_price():
    w = watch(Trigger.BACK_IN_STOCK, target_price=900)
    points = daily(1000, None)
    assert not detect(w, None, obs(901), history(points)).holds
    assert detect(w, None, obs(900), history(points)).holds


def test_back_in_stock_with_a_unit_price_target():
    w = watch(Trigger.BACK_IN_STOCK, target_price=50, use_unit_price=True)
    points = daily(1000, None)
    assert detect(w, 12, obs(600), history(points)).holds
    assert not detect(w, 12, obs(612), history(points)).holds


def test_back_in_stock_after_delivery_needs_a_new_stock_out():
    delivered = NOW - DAY + dt.timedelta(hours=1)
    w = watch(Trigger.BACK_IN_STOCK, last_notified_at=delivered, last_notified_price=Decimal(1000))
    still_in = daily(None, None, 1000)  # restocked 1 day ago, told just after
    judgement = detect(w, None, obs(1000), history(still_in))
    assert not judgement.holds and judgement.reason == ALREADY_NOTIFIED
    out_again = [*still_in, Point(NOW - dt.timedelta(hours=2), 1000, False)]
    assert detect(w, None, obs(1000), history(out_again)).holds


# --- re-arming (price triggers) -----------------------------------------------------------


def _told(at: dt.datetime, value: int | str, detected: dt.datetime | None = None) -> dict:
    """A delivery at `at` of `value`, for a detection made at `detected` (default: `at`)."""
    return {
        "last_notified_at": at,
        "last_notified_price": Decimal(value),
        "last_notified_detected_at": detected or at,
    }


def test_after_delivery_the_same_price_does_not_fire_again():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    points = [*FLAT_1000, Point(told_at - dt.timedelta(hours=1), 850, True)]
    judgement = detect(w, None, obs(850), history(points))
    assert not judgement.holds and judgement.reason == ALREADY_NOTIFIED


def test_after_delivery_wobbles_below_the_line_do_not_fire():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    after = [Point(told_at + dt.timedelta(hours=h), p, True) for h, p in ((1, 870), (2, 880))]
    judgement = detect(w, None, obs(860), history(FLAT_1000 + after))
    assert not judgement.holds and judgement.reason == ALREADY_NOTIFIED


def test_after_delivery_a_lower_price_fires_again():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    assert detect(w, None, obs(849), history(FLAT_1000)).holds


def test_after_delivery_back_above_the_line_and_down_again_fires():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    after = [Point(told_at + dt.timedelta(hours=1), 901, True)]
    assert detect(w, None, obs(890), history(FLAT_1000 + after)).holds


def test_touching_the_line_is_not_going_back_above_it():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    after = [Point(told_at + dt.timedelta(hours=1), 900, True)]
    assert not detect(w, None, obs(890), history(FLAT_1000 + after)).holds


def test_a_stock_out_above_the_line_does_not_re_arm():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=900, **_told(told_at, 850))
    after = [Point(told_at + dt.timedelta(hours=1), 2000, False)]
    assert not detect(w, None, obs(860), history(FLAT_1000 + after)).holds


def test_re_arming_compares_unit_prices_for_unit_watches():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(target_price=50, use_unit_price=True, **_told(told_at, "49.00"))
    above = [Point(told_at + dt.timedelta(hours=1), 612, True)]  # ¥51/unit
    assert detect(w, 12, obs(594), history(above)).holds  # ¥49.50, back under the line
    below = [Point(told_at + dt.timedelta(hours=1), 600, True)]  # ¥50/unit: not above
    assert not detect(w, 12, obs(594), history(below)).holds


def test_price_drop_re_arms_like_the_others():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(Trigger.PRICE_DROP, drop_percent=15, **_told(told_at, 840))
    assert not detect(w, None, obs(845), history(FLAT_1000)).holds
    assert detect(w, None, obs(839), history(FLAT_1000)).holds
    back_up = [Point(told_at + dt.timedelta(hours=1), 1000, True)]
    assert detect(w, None, obs(845), history(FLAT_1000 + back_up)).holds


def test_lowest_does_not_repeat_the_same_low():
    told_at = NOW - dt.timedelta(hours=5)
    w = watch(Trigger.LOWEST, **_told(told_at, 880))
    points = [*FLAT_1000, Point(told_at, 880, True)]
    assert not detect(w, None, obs(880), history(points)).holds
    assert detect(w, None, obs(870), history(points)).holds


# --- recheck ------------------------------------------------------------------------------

DETECTED = NOW - dt.timedelta(minutes=10)


def test_recheck_holds_while_still_at_or_below():
    w = watch(target_price=900)
    assert recheck(w, None, obs(900), {"line": "900"}, DETECTED).holds


def test_recheck_condition_lost_when_the_price_went_back_up():
    judgement = recheck(watch(target_price=900), None, obs(901), {"line": "900"}, DETECTED)
    assert not judgement.holds and judgement.reason == CONDITION_LOST


def test_recheck_out_of_stock():
    judgement = recheck(watch(target_price=900), None, obs(800, in_stock=False), {}, DETECTED)
    assert not judgement.holds and judgement.reason == OUT_OF_STOCK


def test_recheck_counts_shipping():
    judgement = recheck(watch(target_price=900), None, obs(850, shipping=100), {}, DETECTED)
    assert not judgement.holds and judgement.reason == CONDITION_LOST


def test_recheck_takes_the_watchers_current_target():
    lowered = watch(target_price=800)  # was 900 at detection
    judgement = recheck(lowered, None, obs(850), {"line": "900"}, DETECTED)
    assert not judgement.holds and judgement.line == Decimal(800)


def test_recheck_price_drop_uses_the_detection_line():
    w = watch(Trigger.PRICE_DROP, drop_percent=15)
    assert recheck(w, None, obs(850), {"line": "850.5"}, DETECTED).holds
    assert not recheck(w, None, obs(851), {"line": "850.5"}, DETECTED).holds


def test_recheck_unit_price():
    w = watch(target_price=50, use_unit_price=True)
    assert recheck(w, 12, obs(600), {}, DETECTED).holds
    assert not recheck(w, 12, obs(601), {}, DETECTED).holds


def test_recheck_drops_already_notified_when_a_later_delivery_moved_the_baseline():
    w = watch(target_price=900, **_told(DETECTED + dt.timedelta(minutes=1), 850))
    judgement = recheck(w, None, obs(850), {"line": "900"}, DETECTED)
    assert not judgement.holds and judgement.reason == ALREADY_NOTIFIED


def test_recheck_still_sends_a_further_drop_after_a_later_delivery():
    w = watch(target_price=900, **_told(DETECTED + dt.timedelta(minutes=1), 850))
    assert recheck(w, None, obs(849), {"line": "900"}, DETECTED).holds


def test_recheck_sends_a_row_whose_own_detection_was_told_on_the_other_channel():
    # Push went out a minute after the detection; this is the same detection's e-mail row.
    w = watch(target_price=900, **_told(DETECTED + dt.timedelta(minutes=1), 850, DETECTED))
    assert recheck(w, None, obs(850), {"line": "900"}, DETECTED).holds


def test_recheck_ignores_a_delivery_older_than_the_detection():
    w = watch(target_price=900, **_told(DETECTED - DAY, 850))
    assert recheck(w, None, obs(880), {"line": "900"}, DETECTED).holds


def test_recheck_back_in_stock_already_notified_after_the_detection():
    w = watch(Trigger.BACK_IN_STOCK, **_told(DETECTED + dt.timedelta(minutes=1), 800))
    judgement = recheck(w, None, obs(700), {}, DETECTED)
    assert not judgement.holds and judgement.reason == ALREADY_NOTIFIED


def test_recheck_back_in_stock_with_a_target():
    w = watch(Trigger.BACK_IN_STOCK, target_price=900)
    assert recheck(w, None, obs(900), {}, DETECTED).holds
    judgement = recheck(w, None, obs(901), {}, DETECTED)
    assert not judgement.holds and judgement.reason == CONDITION_LOST


@pytest.mark.parametrize("trigger", [Trigger.PRICE_DROP, Trigger.LOWEST])
def test_recheck_without_a_detection_line_does_not_hold(trigger):
    judgement = recheck(watch(trigger), None, obs(1), {"line": None}, DETECTED)
    assert not judgement.holds and judgement.reason == CONDITION_LOST


def test_history_summary_facts():
    points = daily(1000, None, 900)
    built = history(points)
    assert built.previous_in_stock is True
    assert built.span == 3 * DAY
    assert built.low_90 == 900
    assert built.max_since(NOW - 3 * DAY - dt.timedelta(seconds=1)) == 1000
    assert built.max_since(NOW - 2 * DAY) == 900
    assert built.max_since(NOW) is None
    assert built.out_of_stock_since(NOW - 3 * DAY)
    assert not built.out_of_stock_since(NOW - DAY)
