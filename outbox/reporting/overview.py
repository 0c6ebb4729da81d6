"""The admin overview as the template shows it: every count with the link to the changelist
filtered to exactly those rows, the queue's health, and the geometry of the 30-day chart.

The numbers come from `outbox.reporting.stats`; this module only arranges them. The chart is three
small bar rows (sent, dropped, failed), each on its own scale, so a handful of failures is
not flattened under thousands of deliveries.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.conf import settings
from django.utils.formats import date_format
from django.utils.functional import Promise
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from outbox.models import DispatchRun, Reason, Status
from outbox.reporting.stats import ALL_TIME, CHART_STATUSES, REASONED, DayCounts, OutboxStats
from watches.models import Channel

WINDOW_LABELS = {
    "1h": _("Last hour"),
    "24h": _("24 hours"),
    "7d": _("7 days"),
    ALL_TIME: _("All time"),
}
# Column headings of the count tables: narrow, the label above is the tooltip.
WINDOW_SHORT = {"1h": _("1h"), "24h": _("24h"), "7d": _("7d"), ALL_TIME: _("all")}
# Lag beyond this is shown as a problem: the dispatcher runs every minute.
LAG_WARNING_SECONDS = 5 * 60
# No dispatch cycle for this long means no dispatcher is running.
SILENT_WARNING = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class Cell:
    count: int
    url: str


@dataclass(frozen=True)
class CountRow:
    key: str
    label: str | Promise
    cells: list[Cell]
    total_url: str


@dataclass(frozen=True)
class ReasonTable:
    status: str
    label: str | Promise
    rows: list[CountRow]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class ChartRow:
    status: str
    label: str | Promise
    top: float
    height: float
    max_count: int
    total: int
    bars: list[Bar]

    @property
    def label_y(self) -> float:
        return self.top + 14

    @property
    def note_y(self) -> float:
        return self.top + 28

    @property
    def axis_y(self) -> float:
        return self.top + self.height


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int  # where the bars start; the row labels sit left of it
    rows: list[ChartRow]
    day_labels: list[tuple[float, str]]  # (x, "11/29")
    first_day: dt.date
    last_day: dt.date

    @property
    def day_label_y(self) -> float:
        return self.height - 4


@dataclass(frozen=True)
class HaltBanner:
    """A marketplace halted for a configuration fault, as the banner names it: what to set
    (`settings`; none when the fix is its registration on the marketplace's site) and the
    fault in the adapter's words (`detail`)."""

    source: str
    label: str
    settings: list[str]
    detail: str
    since: dt.datetime
    next_probe_at: dt.datetime


@dataclass(frozen=True)
class Overview:
    stats: OutboxStats
    windows: list[tuple[str | Promise, str | Promise]]  # (heading, label)
    status_rows: list[CountRow]
    reason_tables: list[ReasonTable]
    # One table per channel seen: its rows per status (those with any row).
    channel_tables: list[ReasonTable]
    lag_seconds: int
    lag_text: str
    lag_warning: bool
    due_url: str
    stuck: int
    stuck_url: str
    lease_text: str
    last_run: DispatchRun | None
    last_run_silent: bool
    chart: Chart | None
    # Halted marketplaces, and the rows held until they answer again (with their link).
    halts: list[HaltBanner] = field(default_factory=list)
    held: int = 0
    held_url: str = ""


def build_overview(
    stats: OutboxStats, changelist_url: str, halts: list[HaltBanner] | None = None
) -> Overview:
    def link(**params: str | None) -> str:
        params = {key: value for key, value in params.items() if value is not None}
        return f"{changelist_url}?{urlencode(params)}" if params else changelist_url

    def since(window: str) -> str | None:
        return None if window == ALL_TIME else window

    status_rows = [
        CountRow(
            key=status.value,
            label=status.label,
            cells=[
                Cell(
                    stats.status[status.value][w], link(status__exact=status.value, since=since(w))
                )
                for w in stats.windows
            ],
            total_url=link(status__exact=status.value),
        )
        for status in Status
    ]
    reason_tables = [
        ReasonTable(
            status=status.value,
            label=status.label,
            rows=[
                CountRow(
                    key=reason,
                    label=_reason_label(reason),
                    cells=[
                        Cell(
                            counts[w],
                            link(status__exact=status.value, reason__exact=reason, since=since(w)),
                        )
                        for w in stats.windows
                    ],
                    total_url=link(status__exact=status.value, reason__exact=reason),
                )
                for reason, counts in stats.reasons[status.value].items()
            ],
        )
        for status in REASONED
    ]
    channel_tables = [
        ReasonTable(
            status=channel,
            label=_channel_label(channel),
            rows=[
                CountRow(
                    key=status.value,
                    label=status.label,
                    cells=[
                        Cell(
                            counts[w],
                            link(
                                channel__exact=channel,
                                status__exact=status.value,
                                since=since(w),
                            ),
                        )
                        for w in stats.windows
                    ],
                    total_url=link(channel__exact=channel, status__exact=status.value),
                )
                for status in Status
                if any((counts := by_status[status.value]).values())
            ],
        )
        for channel, by_status in stats.channels.items()
    ]
    last_run = stats.last_run
    return Overview(
        stats=stats,
        windows=[(WINDOW_SHORT.get(w, w), WINDOW_LABELS.get(w, w)) for w in stats.windows],
        status_rows=status_rows,
        reason_tables=reason_tables,
        channel_tables=channel_tables,
        lag_seconds=stats.lag_seconds,
        lag_text=short_duration(stats.lag_seconds) if stats.oldest_due_at else gettext("none"),
        lag_warning=stats.lag_seconds > LAG_WARNING_SECONDS,
        due_url=link(queue="due"),
        stuck=stats.stuck,
        stuck_url=link(queue="stuck"),
        lease_text=short_duration(settings.OUTBOX_LEASE_SECONDS),
        last_run=last_run,
        last_run_silent=last_run is None or stats.now - last_run.started_at > SILENT_WARNING,
        chart=build_chart(stats.daily) if stats.daily else None,
        halts=list(halts or []),
        held=stats.reasons[Status.RETRY].get(Reason.MARKETPLACE_HALTED, {}).get(ALL_TIME, 0),
        held_url=link(status__exact=Status.RETRY, reason__exact=Reason.MARKETPLACE_HALTED),
    )


def short_duration(seconds: int) -> str:
    """45 s, 12 min, 3 h 5 min, 2 d 4 h: precise enough to read at a glance."""
    if seconds < 60:
        return gettext("%(s)d s") % {"s": seconds}
    minutes = seconds // 60
    if minutes < 60:
        return gettext("%(m)d min") % {"m": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        if minutes:
            return gettext("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
        return gettext("%(h)d h") % {"h": hours}
    days, hours = divmod(hours, 24)
    if hours:
        return gettext("%(d)d d %(h)d h") % {"d": days, "h": hours}
    return gettext("%(d)d d") % {"d": days}


def _channel_label(channel: str) -> str:
    try:
        return str(Channel(channel).label)
    except ValueError:  # a channel no longer configured still gets counted and shown
        return channel


def _reason_label(reason: str) -> str:
    if not reason:
        return gettext("(none)")
    try:
        return str(Reason(reason).label)
    except ValueError:  # a reason outside the vocabulary still gets counted and shown
        return reason


def build_chart(daily: list[DayCounts], *, width: int = 460, row_height: int = 44) -> Chart:
    """Geometry of one bar per day per status, in SVG user units. Left margin for the labels,
    a gap between rows, day labels under the last row."""
    left, right, gap, bottom = 72, 8, 14, 18
    slot = (width - left - right) / max(len(daily), 1)
    bar_width = max(slot * 0.72, 1.0)
    rows: list[ChartRow] = []
    top = 4.0
    for status in CHART_STATUSES:
        values = [getattr(day, status.value) for day in daily]
        peak = max(values, default=0)
        bars = []
        for i, (day, value) in enumerate(zip(daily, values, strict=True)):
            height = 0.0 if not peak else max(value / peak * row_height, 1.0 if value else 0.0)
            bars.append(
                Bar(
                    x=round(left + i * slot + (slot - bar_width) / 2, 2),
                    y=round(top + row_height - height, 2),
                    width=round(bar_width, 2),
                    height=round(height, 2),
                    title=gettext("%(day)s: %(count)s %(status)s")
                    % {
                        "day": date_format(day.day, "D n/j"),
                        "count": f"{value:,}",
                        "status": str(status.label).lower(),
                    },
                )
            )
        rows.append(
            ChartRow(
                status=status.value,
                label=status.label,
                top=top,
                height=row_height,
                max_count=peak,
                total=sum(values),
                bars=bars,
            )
        )
        top += row_height + gap
    # A label every 7 days, counted back from today so today is always labelled.
    day_labels = [
        (round(left + i * slot + slot / 2, 2), f"{day.day:%m/%d}")
        for i, day in enumerate(daily)
        if (len(daily) - 1 - i) % 7 == 0
    ]
    return Chart(
        width=width,
        height=int(top - gap + bottom),
        left=left,
        rows=rows,
        day_labels=day_labels,
        first_day=daily[0].day,
        last_day=daily[-1].day,
    )
