"""Triggers: when is a listing worth buying now, for one watch?

Each trigger is judged by two pure functions over plain values, on the price incl. shipping —
or, for a watch "after points" (`after_points`), on the price after points (price + shipping −
the points everyone gets, `net_price`; a device that says it is a premium member also has the
member-only points taken off its own target's comparison). Such a watch's history, 90-day
low and typical price are after points too: the caller hands the matching History.

- `detect` (at polling): given the new observation, the listing's history and the watch,
  should a notification be enqueued? Its snapshot is stored with the outbox row.
- `recheck` (right before sending): given the freshly re-fetched observation and that
  snapshot, does it still hold? The message is then built from the fresh value.

The four kinds, each holding when the compared value is at or below its *line*:
- `target_price`: the line is the watcher's target. The compared value is the effective price
  (price + shipping where known), or the unit price when the watch asks for it and the listing
  has units per pack.
- `price_drop`: the line is N % (the watcher's, default 15) below the listing's typical price,
  the time-weighted median of the last 30 days.
- `lowest`: the line is the lowest effective price of the last 90 days; no line at all until
  the history spans 14 days.
- `back_in_stock`: the listing was out of stock since the watch last had news and is in stock
  now; with a target, also at or below it.

Re-arming: after a delivered notification, a price trigger fires again only when the value goes
lower than the last delivered one, or went back above the line since and crosses it again (as
this watcher counts it: a member's own points taken off the history's prices, the newest
observation's standing in for theirs); `lowest` also once the low it told has left the 90-day
window and the value is below every price the window holds; `back_in_stock` fires again only
after a new stock-out. A watch whose settings changed what it compares (`judged_since`) is
judged from that moment, as if new.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

from watches.models import Trigger, net_price, unit_price

TYPICAL_WINDOW = dt.timedelta(days=30)
LOW_WINDOW = dt.timedelta(days=90)
LOWEST_MIN_HISTORY = dt.timedelta(days=14)
DEFAULT_DROP_PERCENT = 15

# Why a judgement says no; the outbox uses the re-check's words as its drop reasons.
OUT_OF_STOCK = "out_of_stock"
CONDITION_LOST = "condition_lost"
ALREADY_NOTIFIED = "already_notified"
# The condition held after points at detection and does not now only because fewer points
# are given (a campaign ended): with the points counted then, the fresh price still holds.
POINTS_ENDED = "points_ended"

_UNIT_TRIGGERS = (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK)
_MICROSECOND = dt.timedelta(microseconds=1)


class WatchLike(Protocol):
    """What triggers read of a watch (a `Watch` row, saved or not)."""

    trigger: str
    target_price: int | None
    drop_percent: int | None
    use_unit_price: bool
    after_points: bool
    last_notified_price: Decimal | None
    last_notified_at: dt.datetime | None
    last_notified_detected_at: dt.datetime | None
    created_at: dt.datetime
    judged_since: dt.datetime | None


class ObservationLike(Protocol):
    """What triggers read of an observation: a marketplace's answer (frozen), a listing or
    an offer (read-only here; a listing's stock may be unknown, judged out of stock)."""

    @property
    def price(self) -> int | None: ...
    @property
    def shipping(self) -> int | None: ...
    @property
    def in_stock(self) -> bool | None: ...
    @property
    def points(self) -> int: ...
    @property
    def member_points(self) -> int: ...


class Point(NamedTuple):
    """One past observation, as triggers see it: its price incl. shipping — or, in a history
    after points, its price after points (`watches.polling.history.as_point`). A named tuple:
    a listing's history is hundreds of these, built on every poll and re-fetch, and a tuple
    is the cheapest to build."""

    observed_at: dt.datetime
    effective_price: int | None
    in_stock: bool


@dataclass(frozen=True)
class History:
    """What triggers need of a listing's past, computed once per listing per poll."""

    typical: Decimal | None  # time-weighted median effective price, last 30 days, in stock
    low_90: int | None  # lowest effective price observed in the last 90 days, in stock
    span: dt.timedelta  # how far back the history goes
    previous_in_stock: bool | None  # stock at the observation before this one
    # The latest stock-out, and when the listing was next seen in stock after it (None while
    # it is still out): enough to answer "out of stock at any time since T" in O(1).
    last_out_at: dt.datetime | None = None
    restocked_at: dt.datetime | None = None
    # In time order, with the running maximum of in-stock prices from each point to the end,
    # so "highest price since T" is one bisection.
    times: tuple[dt.datetime, ...] = field(default=(), repr=False)
    suffix_max: tuple[int | None, ...] = field(default=(), repr=False)

    def max_since(self, since: dt.datetime) -> int | None:
        """The highest in-stock effective price observed strictly after `since`."""
        index = bisect.bisect_right(self.times, since)
        return self.suffix_max[index] if index < len(self.suffix_max) else None

    def out_of_stock_since(self, since: dt.datetime) -> bool:
        """Whether the listing was out of stock at any time after `since` — including a
        stock-out that was already under way at `since`."""
        if self.last_out_at is None:
            return False
        return self.restocked_at is None or self.restocked_at > since


def build_history(points: Iterable[Point], now: dt.datetime) -> History:
    """Summarise past observations (not including the one being judged) as of `now`."""
    ordered = tuple(sorted(points, key=lambda p: p.observed_at))
    last_out_at = restocked_at = None
    for index in range(len(ordered) - 1, -1, -1):
        if not ordered[index].in_stock:
            last_out_at = ordered[index].observed_at
            if index + 1 < len(ordered):
                restocked_at = ordered[index + 1].observed_at
            break
    suffix: list[int | None] = [None] * len(ordered)
    running: int | None = None
    for index in range(len(ordered) - 1, -1, -1):
        p = ordered[index]
        if p.in_stock and p.effective_price is not None:
            running = p.effective_price if running is None else max(running, p.effective_price)
        suffix[index] = running
    typical, low_90 = summary(ordered, now)
    return History(
        typical=typical,
        low_90=low_90,
        span=(now - ordered[0].observed_at) if ordered else dt.timedelta(0),
        previous_in_stock=ordered[-1].in_stock if ordered else None,
        last_out_at=last_out_at,
        restocked_at=restocked_at,
        times=tuple(p.observed_at for p in ordered),
        suffix_max=tuple(suffix),
    )


def summary(ordered: Sequence[Point], now: dt.datetime) -> tuple[Decimal | None, int | None]:
    """(typical price, 90-day low) as of `now` from points in time order: all a History
    needs of prices, and all a listing keeps of them (`Listing.typical_price`, `low_90`)."""
    low_start = now - LOW_WINDOW
    window = [
        p.effective_price
        for p in ordered
        if p.in_stock and p.effective_price is not None and p.observed_at >= low_start
    ]
    return _typical(ordered, now), min(window) if window else None


def _typical(ordered: Sequence[Point], now: dt.datetime) -> Decimal | None:
    """The median of the last 30 days, each in-stock price weighted by how long it held.

    Weighting by time, not by sample, matters because history skips writing unchanged prices:
    a plain median of rows would lean towards whatever period was sampled most densely. With
    evenly spaced points it is the plain median, the mean of the two middle values included.
    """
    start = now - TYPICAL_WINDOW
    weights: dict[int, int] = defaultdict(int)
    # Points that ended before the window weigh nothing: start at the last one at or before
    # its start (its price still holds into the window).
    first = max(bisect.bisect_right(ordered, start, key=lambda p: p.observed_at) - 1, 0)
    for index in range(first, len(ordered)):
        point = ordered[index]
        end = ordered[index + 1].observed_at if index + 1 < len(ordered) else now
        begin = max(point.observed_at, start)
        if end <= begin or not point.in_stock or point.effective_price is None:
            continue
        weights[point.effective_price] += (min(end, now) - begin) // _MICROSECOND
    total = sum(weights.values())
    if not total:
        return None
    prices = sorted(weights)
    seen = 0
    for index, price in enumerate(prices):
        seen += weights[price]
        if 2 * seen > total:
            return Decimal(price)
        if 2 * seen == total:
            return (Decimal(price) + Decimal(prices[index + 1])) / 2
    raise AssertionError("unreachable: the weights sum to the total")


@dataclass(frozen=True)
class Judgement:
    holds: bool
    reason: str = ""  # why not, when it does not hold
    value: Decimal | None = None  # the compared value (effective or unit price)
    line: Decimal | None = None  # the value at or below which it holds
    points: int = 0  # the points taken off the price in `value` (a watch after points)

    def snapshot(self, extra: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "value": _num(self.value),
            "line": _num(self.line),
            "points_counted": self.points,
            **extra,
        }


def counted_points(watch: WatchLike, observation: ObservationLike, members: bool = False) -> int:
    """The points taken off the price for `watch`: none unless it judges after points; the
    points everyone gets; and for a device that says it is a premium member (`members`), the
    member-only points too where the line is the watcher's own (a target). A line drawn
    from the history (typical price, 90-day low) is everyone's, and so is the value compared
    with it."""
    if not watch.after_points:
        return 0
    points = observation.points or 0
    if members_count(watch, members):
        points += observation.member_points or 0
    return points


def members_count(watch: WatchLike, members: bool) -> bool:
    """Whether the member-only points are taken off for `watch` of a device that says it is
    a premium member (`members`): after points, against the watcher's own target."""
    return members and watch.after_points and watch.trigger in _UNIT_TRIGGERS


def compared_value(
    trigger: str,
    use_unit_price: bool,
    units_per_pack: int | None,
    price: int | None,
    shipping: int | None,
    points: int = 0,
) -> Decimal | None:
    """The number a trigger compares: the unit price for target-style triggers when the watch
    asks for it and the listing has units per pack, else the effective price — less
    `points` (a watch after points: `counted_points`)."""
    total = net_price(price, shipping, points)
    if total is None:
        return None
    if trigger in _UNIT_TRIGGERS and use_unit_price and units_per_pack:
        return unit_price(total, units_per_pack)
    return Decimal(total)


def line_for(watch: WatchLike, history: History | None) -> Decimal | None:
    """The value at or below which the watch's trigger holds; None when it cannot be known
    (no target, or not enough history)."""
    trigger = watch.trigger
    if trigger in _UNIT_TRIGGERS:
        return Decimal(watch.target_price) if watch.target_price is not None else None
    if history is None:
        return None
    if trigger == Trigger.PRICE_DROP:
        if history.typical is None:
            return None
        percent = watch.drop_percent or DEFAULT_DROP_PERCENT
        # Exact: a value exactly N % below the typical price holds.
        return history.typical * (100 - percent) / 100
    if trigger == Trigger.LOWEST:
        if history.low_90 is None or history.span < LOWEST_MIN_HISTORY:
            return None
        return Decimal(history.low_90)
    raise ValueError(f"unknown trigger {trigger!r}")


def detect(
    watch: WatchLike,
    units_per_pack: int | None,
    observation: ObservationLike,
    history: History,
    *,
    members: bool = False,
) -> Judgement:
    """Should `observation` (the listing's newest) enqueue a notification for `watch`?
    `history` holds the observations before it — after points for a watch after points.
    `members`: the watch's device says it is a premium member (`counted_points`)."""
    if not observation.in_stock or observation.price is None:
        return Judgement(False, OUT_OF_STOCK)
    points = counted_points(watch, observation, members)
    value = compared_value(
        watch.trigger,
        watch.use_unit_price,
        units_per_pack,
        observation.price,
        observation.shipping,
        points,
    )
    assert value is not None  # the price is known (above), so is any value compared with it
    line = line_for(watch, history)

    def judged(holds: bool, reason: str = "") -> Judgement:
        return Judgement(holds, reason, value, line, points)

    if watch.trigger == Trigger.BACK_IN_STOCK:
        if line is not None and value > line:
            return judged(False, CONDITION_LOST)
        # Not "out at the previous observation": a dispatcher's re-fetch may have written the
        # first in-stock point, and the poll after it must still see the comeback.
        notified = watch.last_notified_at is not None
        since = watch.last_notified_at or watch.judged_since or watch.created_at
        if not history.out_of_stock_since(since):
            return judged(False, ALREADY_NOTIFIED if notified else CONDITION_LOST)
        return judged(True)
    if line is None or value > line:
        return judged(False, CONDITION_LOST)
    # What history cannot say of this watcher: the member-only points they also count.
    own_points = points - counted_points(watch, observation)
    if not _rearmed(watch, value, line, history, units_per_pack, own_points):
        return judged(False, ALREADY_NOTIFIED)
    return judged(True)


def recheck(
    watch: WatchLike,
    units_per_pack: int | None,
    fresh: ObservationLike,
    snapshot: Mapping[str, Any],
    detected_at: dt.datetime,
    *,
    members: bool = False,
) -> Judgement:
    """Does the detection still hold on the freshly re-fetched observation? Judged as
    detection judged it: after points for a watch after points. When it held then and does
    not now only because fewer points are given — with the points the detection counted,
    the fresh price would still hold — the reason is `points_ended`."""
    if not fresh.in_stock or fresh.price is None:
        return Judgement(False, OUT_OF_STOCK)
    points = counted_points(watch, fresh, members)
    value = compared_value(
        watch.trigger, watch.use_unit_price, units_per_pack, fresh.price, fresh.shipping, points
    )
    assert value is not None  # the price is known (above), so is any value compared with it
    if watch.trigger in _UNIT_TRIGGERS:
        # The watcher may have moved their target since detection: theirs is the line now.
        line = Decimal(watch.target_price) if watch.target_price is not None else None
    else:
        line = Decimal(str(snapshot["line"])) if snapshot.get("line") is not None else None
    lost = line is not None and value > line
    if watch.trigger != Trigger.BACK_IN_STOCK:
        lost = lost or line is None
    if lost:
        reason = CONDITION_LOST
        then = snapshot.get("points_counted")
        if watch.after_points and line is not None and isinstance(then, int) and then > points:
            kept = compared_value(
                watch.trigger,
                watch.use_unit_price,
                units_per_pack,
                fresh.price,
                fresh.shipping,
                then,
            )
            if kept is not None and kept <= line:
                reason = POINTS_ENDED
        return Judgement(False, reason, value, line, points)
    told, last_value = watch.last_notified_detected_at, watch.last_notified_price
    # A later detection was delivered (on any channel): only a further drop is still news.
    # This detection's own row on the device's other channel, delivered first, is not one:
    # the person asked to be told on both, and each row goes out on its own.
    if (
        told is not None
        and told > detected_at
        and (
            watch.trigger == Trigger.BACK_IN_STOCK
            or last_value is None
            or value >= Decimal(last_value)
        )
    ):
        return Judgement(False, ALREADY_NOTIFIED, value, line, points)
    return Judgement(True, "", value, line, points)


def already_told(watch: WatchLike, value: Decimal | None) -> bool:
    """A notification was delivered at `value` or lower: by itself, `value` is no news (only
    a further drop is, or going back above the line and crossing it again)."""
    return (
        value is not None
        and watch.last_notified_at is not None
        and watch.last_notified_price is not None
        and value >= Decimal(watch.last_notified_price)
    )


def _rearmed(
    watch: WatchLike,
    value: Decimal,
    line: Decimal,
    history: History,
    units_per_pack: int | None,
    own_points: int = 0,
) -> bool:
    """Whether a value no lower than the one last told is news again: the price went back
    above the line since, as this watcher counts it (`own_points`: the member-only points
    they count, which the history leaves out — the observation's, standing in for those of
    the prices since); or, for the 90-day low, the low told has left the window and this
    value is below every price the window holds: a new low the watcher has not heard of."""
    told_at = watch.last_notified_at
    if told_at is None or not already_told(watch, value):
        return True
    if (
        watch.trigger == Trigger.LOWEST
        and watch.last_notified_price is not None
        and Decimal(watch.last_notified_price) < line
        and value < line
    ):
        return True
    highest = history.max_since(told_at)
    if highest is None:
        return False
    highest_value = compared_value(
        watch.trigger, watch.use_unit_price, units_per_pack, highest - own_points, None
    )
    return highest_value is not None and highest_value > line


def _num(value: Decimal | None) -> str | None:
    return None if value is None else str(value)
