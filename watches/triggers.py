"""Triggers: when is a listing worth buying now, for one watch?

Each trigger is judged by two pure functions over plain values:
- `detect` (at polling): given the new observation, the listing's history and the watch,
  should a notification be enqueued? Its snapshot is stored with the outbox row.
- `recheck` (right before sending): given the freshly re-fetched observation and that
  snapshot, does it still hold? The message is then built from the fresh value.

Prices compare as effective price (price + shipping where known). A `target_price` (or a
`back_in_stock` target) compares the unit price when the watch asks for it and the listing
has units per pack. A trigger re-arms after delivery only when the price goes lower than the
last delivered one, or returns above the line and crosses it again.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from watches.models import Trigger, effective_price, unit_price

TYPICAL_WINDOW = dt.timedelta(days=30)
LOW_WINDOW = dt.timedelta(days=90)
LOWEST_MIN_HISTORY = dt.timedelta(days=14)
DEFAULT_DROP_PERCENT = 15

# Why a re-check says no; the outbox uses these words as its drop reasons.
OUT_OF_STOCK = "out_of_stock"
CONDITION_LOST = "condition_lost"
ALREADY_NOTIFIED = "already_notified"


@dataclass(frozen=True)
class Point:
    """One past observation, as triggers see it."""

    observed_at: dt.datetime
    effective_price: int | None
    in_stock: bool


@dataclass(frozen=True)
class History:
    """What triggers need of a listing's past, computed once per listing per poll."""

    typical: Decimal | None  # median effective price, last 30 days, in stock
    low_90: int | None  # lowest effective price, last 90 days, in stock
    span: dt.timedelta  # how far back the history goes
    previous_in_stock: bool | None  # stock at the observation before this one
    points: tuple[Point, ...] = ()  # in time order; used for re-arming

    def max_since(self, since: dt.datetime) -> int | None:
        prices = [
            p.effective_price
            for p in self.points
            if p.observed_at > since and p.in_stock and p.effective_price is not None
        ]
        return max(prices) if prices else None


def build_history(points: Iterable[Point], now: dt.datetime) -> History:
    """Summarise past observations (not including the one being judged)."""
    ordered = tuple(sorted(points, key=lambda p: p.observed_at))
    priced = [p for p in ordered if p.in_stock and p.effective_price is not None]
    recent = [p.effective_price for p in priced if p.observed_at >= now - TYPICAL_WINDOW]
    window = [p.effective_price for p in priced if p.observed_at >= now - LOW_WINDOW]
    return History(
        typical=Decimal(str(statistics.median(recent))) if recent else None,
        low_90=min(window) if window else None,
        span=(now - ordered[0].observed_at) if ordered else dt.timedelta(0),
        previous_in_stock=ordered[-1].in_stock if ordered else None,
        points=ordered,
    )


@dataclass(frozen=True)
class Judgement:
    holds: bool
    reason: str = ""  # why not, when it does not hold
    value: Decimal | None = None  # the compared value (effective or unit price)
    line: Decimal | None = None  # the value at or below which it holds

    def snapshot(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "value": _num(self.value),
            "line": _num(self.line),
            **extra,
        }


def compared_value(
    trigger: str, use_unit_price: bool, units_per_pack: int | None, price: int | None,
    shipping: int | None,
) -> Decimal | None:
    total = effective_price(price, shipping)
    if total is None:
        return None
    if trigger in (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK) and use_unit_price and units_per_pack:
        return unit_price(total, units_per_pack)
    return Decimal(total)


def line_for(watch, history: History | None) -> Decimal | None:
    """The value at or below which the watch's trigger holds; None when it cannot be known
    (no target, or not enough history)."""
    trigger = watch.trigger
    if trigger in (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK):
        return Decimal(watch.target_price) if watch.target_price is not None else None
    if history is None:
        return None
    if trigger == Trigger.PRICE_DROP:
        if history.typical is None:
            return None
        percent = watch.drop_percent or DEFAULT_DROP_PERCENT
        return (history.typical * (100 - percent) / 100).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )
    if trigger == Trigger.LOWEST:
        if history.low_90 is None or history.span < LOWEST_MIN_HISTORY:
            return None
        return Decimal(history.low_90)
    raise ValueError(f"unknown trigger {trigger!r}")


def detect(watch, units_per_pack: int | None, observation, history: History) -> Judgement:
    """Should `observation` (the listing's newest) enqueue a notification for `watch`?"""
    if not observation.in_stock or observation.price is None:
        return Judgement(False, OUT_OF_STOCK)
    value = compared_value(
        watch.trigger, watch.use_unit_price, units_per_pack, observation.price, observation.shipping
    )
    line = line_for(watch, history)
    if watch.trigger == Trigger.BACK_IN_STOCK:
        came_back = history.previous_in_stock is False
        within = line is None or value <= line
        if not (came_back and within):
            return Judgement(False, CONDITION_LOST, value, line)
        if watch.last_notified_at is not None and not _went_out_since(history, watch.last_notified_at):
            return Judgement(False, ALREADY_NOTIFIED, value, line)
        return Judgement(True, "", value, line)
    if line is None or value > line:
        return Judgement(False, CONDITION_LOST, value, line)
    if not _rearmed(watch, value, line, history, units_per_pack):
        return Judgement(False, ALREADY_NOTIFIED, value, line)
    return Judgement(True, "", value, line)


def recheck(
    watch, units_per_pack: int | None, fresh, snapshot: Mapping[str, Any], detected_at: dt.datetime
) -> Judgement:
    """Does the detection still hold on the freshly re-fetched observation?"""
    if not fresh.in_stock or fresh.price is None:
        return Judgement(False, OUT_OF_STOCK)
    value = compared_value(
        watch.trigger, watch.use_unit_price, units_per_pack, fresh.price, fresh.shipping
    )
    if watch.trigger in (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK):
        # The watcher may have moved their target since detection: theirs is the line now.
        line = Decimal(watch.target_price) if watch.target_price is not None else None
    else:
        line = Decimal(str(snapshot["line"])) if snapshot.get("line") is not None else None
    if watch.trigger == Trigger.BACK_IN_STOCK:
        if line is not None and value > line:
            return Judgement(False, CONDITION_LOST, value, line)
    elif line is None or value > line:
        return Judgement(False, CONDITION_LOST, value, line)
    last_at, last_value = watch.last_notified_at, watch.last_notified_price
    if last_at is not None and last_at >= detected_at:
        # Something was delivered after this detection: only a further drop is news.
        if watch.trigger == Trigger.BACK_IN_STOCK or last_value is None or value >= last_value:
            return Judgement(False, ALREADY_NOTIFIED, value, line)
    return Judgement(True, "", value, line)


def _rearmed(watch, value: Decimal, line: Decimal, history: History, units_per_pack) -> bool:
    if watch.last_notified_at is None or watch.last_notified_price is None:
        return True
    if value < watch.last_notified_price:
        return True
    highest = history.max_since(watch.last_notified_at)
    if highest is None:
        return False
    highest_value = compared_value(watch.trigger, watch.use_unit_price, units_per_pack, highest, 0)
    return highest_value is not None and highest_value > line


def _went_out_since(history: History, since: dt.datetime) -> bool:
    return any(not p.in_stock for p in history.points if p.observed_at > since)


def _num(value: Decimal | None) -> str | None:
    return None if value is None else str(value)
