"""A listing's price history as geometry for a server-rendered inline SVG chart.

No JavaScript charting library: the page must be fast on a phone opened from a notification.
The template `watches/_price_chart.html` draws what `price_chart` computes; the elements a
chart has many of (grid lines, bands, ticks, the weekly table's rows) come as markup built
here (`Chart.*_html`): the template language costs some microseconds a value, and a chart has
about 160, which made drawing it cost as much as the rest of a listing page together.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from watches.templatetags.yasugoro import yen
from watches.triggers import Point

WIDTH, HEIGHT = 420, 230
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 60, 12, 14, 26


@dataclass(frozen=True)
class Line:
    kind: str  # "low", "typical", "target": the CSS class and legend entry
    value: int
    y: float


@dataclass(frozen=True)
class Band:
    x: float
    width: float


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    path: str = ""
    # The price after points (price + shipping − points), drawn beside the price incl.
    # shipping when points were given at some time in the window; "" otherwise.
    net_path: str = ""
    stockouts: tuple[Band, ...] = ()
    lines: tuple[Line, ...] = ()
    yticks: tuple[Tick, ...] = ()
    xticks: tuple[Tick, ...] = ()
    last: tuple[float, float] | None = None  # the newest point, marked on the chart
    plot: tuple[float, float, float, float] = (
        PAD_LEFT,
        PAD_TOP,
        WIDTH - PAD_RIGHT,
        HEIGHT - PAD_BOTTOM,
    )
    empty: bool = True
    weeks: tuple[dict, ...] = field(default_factory=tuple)  # the text alternative

    @property
    def yticks_html(self) -> SafeString:
        """Per price tick, a grid line and its label."""
        x0, _, x1, _ = self.plot
        return format_html_join(
            "",
            '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>\n    <text class="axis" '
            'x="{}" y="{}" text-anchor="end" dominant-baseline="middle">{}</text>',
            ((x0, x1, t.pos, t.pos, x0 - 6, t.pos, t.label) for t in self.yticks),
        )

    @property
    def stockouts_html(self) -> SafeString:
        title = gettext("Out of stock")
        _, top, _, bottom = self.plot
        return format_html_join(
            "",
            '<rect class="stockout" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
            ((band.x, top, band.width, bottom - 14, title) for band in self.stockouts),
        )

    @property
    def lines_html(self) -> SafeString:
        x0, _, x1, _ = self.plot
        return format_html_join(
            "",
            '<line class="mark-{}" x1="{}" x2="{}" y1="{}" y2="{}"/>',
            ((line.kind, x0, x1, line.y, line.y) for line in self.lines),
        )

    @property
    def xticks_html(self) -> SafeString:
        last = len(self.xticks) - 1
        return format_html_join(
            "",
            '<text class="axis" x="{}" y="{}" text-anchor="{}">{}</text>',
            (
                (tick.pos, self.height - 8, _anchor(k, last), tick.label)
                for k, tick in enumerate(self.xticks)
            ),
        )

    @property
    def weeks_html(self) -> SafeString:
        """The weekly table's rows (with the lowest price after points when the chart draws
        that line)."""
        stock = {True: gettext("Sold out at times"), False: gettext("In stock")}
        net = "<td>{}</td>" if self.net_path else "{}"
        return format_html_join(
            "",
            "<tr><td>{}/{}–{}/{}</td><td>{}</td>" + net + "<td>{}</td><td>{}</td></tr>",
            (
                (
                    week["start"].month,
                    week["start"].day,
                    week["end"].month,
                    week["end"].day,
                    yen(week["low"]),
                    yen(week["low_net"]) if self.net_path else "",
                    yen(week["high"]),
                    stock[week["stockout"]],
                )
                for week in self.weeks
            ),
        )


def _anchor(k: int, last: int) -> str:
    return "start" if k == 0 else "end" if k == last else "middle"


def _nice_step(span: float) -> int:
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 50000):
        if span / step <= 4:
            return step
    return 100000


def price_chart(
    points: Sequence[Point],
    *,
    now: dt.datetime,
    days: int = 90,
    low: int | None = None,
    typical: int | None = None,
    target: int | Decimal | None = None,
    net_points: Sequence[Point] = (),
) -> Chart:
    """The chart of `points` (prices incl. shipping) and, when any differs from its price
    incl. shipping, of `net_points` (the same moments after points) as a second line."""
    start = now - dt.timedelta(days=days)
    points = [p for p in points if p.observed_at >= start]
    priced = [p for p in points if p.in_stock and p.effective_price is not None]
    if not priced:
        return Chart()
    nets = [p for p in net_points if p.observed_at >= start]
    if [p.effective_price for p in nets] == [p.effective_price for p in points]:
        nets = []  # no points at any time: one line says it all
    values = [v for p in priced if (v := p.effective_price) is not None]
    values += [v for p in nets if p.in_stock and (v := p.effective_price) is not None]
    marks = [v for v in (low, typical, int(target) if target is not None else None) if v]
    lo: float
    hi: float
    lo, hi = min(values + marks), max(values + marks)
    margin = max((hi - lo) * 0.08, 10)
    lo, hi = max(0, lo - margin), hi + margin
    x0, y0, x1, y1 = PAD_LEFT, PAD_TOP, WIDTH - PAD_RIGHT, HEIGHT - PAD_BOTTOM
    seconds = (now - start).total_seconds()

    def x(at: dt.datetime) -> float:
        return round(x0 + (x1 - x0) * (at - start).total_seconds() / seconds, 1)

    def y(value: float) -> float:
        return round(y1 - (y1 - y0) * (value - lo) / (hi - lo), 1)

    path, stockouts = _step_line(points, x, y, x(now))
    net_path = _step_line(nets, x, y, x(now))[0] if nets else ""

    step = _nice_step(hi - lo)
    first_tick = int(lo // step + 1) * step
    yticks = tuple(Tick(y(v), f"¥{v:,}") for v in range(first_tick, int(hi) + 1, step))
    tz = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    xticks = tuple(
        Tick(x(at), f"{at.astimezone(tz):%-m/%-d}")
        for at in (start + dt.timedelta(days=days * k / 4) for k in range(5))
    )
    lines = tuple(
        Line(kind, int(value), y(float(value)))
        for kind, value in (("low", low), ("typical", typical), ("target", target))
        if value
    )
    last = priced[-1]
    assert last.effective_price is not None  # `priced` holds priced points only
    return Chart(
        path=path,
        net_path=net_path,
        stockouts=tuple(stockouts),
        lines=lines,
        yticks=yticks,
        xticks=xticks,
        last=(x(last.observed_at), y(last.effective_price)),
        empty=False,
        weeks=_weekly(points, nets, start, now, tz),
    )


def _step_line(points: Sequence[Point], x, y, end_x: float) -> tuple[str, list[Band]]:
    """A step line's path — a price holds until the next observation; out of stock breaks
    the line — and the stock-outs' bands."""
    segments: list[str] = []
    previous_y: float | None = None
    stockouts: list[Band] = []
    out_since: float | None = None
    for point in points:
        px = x(point.observed_at)
        if not point.in_stock or point.effective_price is None:
            if previous_y is not None:
                segments.append(f"H{px}")
            previous_y = None
            if out_since is None:
                out_since = px
            continue
        if out_since is not None:
            stockouts.append(Band(out_since, round(px - out_since, 1)))
            out_since = None
        py = y(point.effective_price)
        segments.append(f"H{px}V{py}" if previous_y is not None else f"M{px},{py}")
        previous_y = py
    if previous_y is not None:
        segments.append(f"H{end_x}")
    if out_since is not None:
        stockouts.append(Band(out_since, round(end_x - out_since, 1)))
    return "".join(segments), stockouts


def _weekly(
    points: Sequence[Point], nets: Sequence[Point], start: dt.datetime, now: dt.datetime, tz
) -> tuple[dict, ...]:
    """The text alternative: per week, the lowest and highest price, the lowest after
    points, and any stock-out."""
    weeks = []
    week_start = start
    while week_start < now:
        week_end = min(week_start + dt.timedelta(days=7), now)
        inside = [p for p in points if week_start <= p.observed_at < week_end]
        prices = [p.effective_price for p in inside if p.in_stock and p.effective_price is not None]
        net = [
            p.effective_price
            for p in nets
            if week_start <= p.observed_at < week_end
            and p.in_stock
            and p.effective_price is not None
        ]
        if inside:
            weeks.append(
                {
                    "start": week_start.astimezone(tz).date(),
                    "end": (week_end - dt.timedelta(seconds=1)).astimezone(tz).date(),
                    "low": min(prices) if prices else None,
                    "low_net": min(net) if net else None,
                    "high": max(prices) if prices else None,
                    "stockout": any(not p.in_stock for p in inside),
                }
            )
        week_start = week_end
    return tuple(reversed(weeks))
