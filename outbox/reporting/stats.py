"""The outbox in numbers: what the admin overview shows, `manage.py outbox_stats` prints and
/metrics exposes.

A handful of queries, each answered from an index or a small table:
1. the settled rows (sent, dropped) that last moved before the daily snapshot's boundary —
   from the snapshot (`outbox.reporting.summary`), per service day, status, reason and channel;
2. the settled rows that moved since — one GROUP BY (status, reason, channel) over the
   covering index `outbox_status_reason_channel` (status, reason, channel, updated_at),
   seeking each (status, reason, channel) run to the boundary, in index order, with
   `COUNT(…) FILTER (WHERE updated_at >= …)` per window (last hour, 24 h, 7 days) and, for
   the chart, per service day;
3. every row in another status (the queue and the failed rows: few) — the same, whole;
4. the oldest due row (queue lag) — the queue rows only (`outbox_due`);
5. rows stuck in `sending` past the lease — the `sending` rows only;
6. the last dispatch cycle — the `dispatchrun_recent` index.

A row is counted in a window by when it last changed status (`updated_at`, written by every
transition): "dropped in the last hour" means rows that were dropped in the last hour.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from outbox.expressions import LocalDate
from outbox.models import (
    DEDUP_ZONE,
    DUE_STATUSES,
    SETTLED,
    DispatchRun,
    Outbox,
    Reason,
    Status,
)
from outbox.reporting.summary import snapshot_days, snapshot_totals, usable_snapshot
from watches.models import Channel

ALL_TIME = "all"
# The overview's windows, shortest first; None is all time.
WINDOWS: dict[str, dt.timedelta | None] = {
    "1h": dt.timedelta(hours=1),
    "24h": dt.timedelta(hours=24),
    "7d": dt.timedelta(days=7),
    ALL_TIME: None,
}
# The statuses whose reason is worth a breakdown: the outcomes that were not a delivery.
REASONED = (Status.DROPPED, Status.RETRY, Status.FAILED)
CHART_STATUSES = (Status.SENT, Status.DROPPED, Status.FAILED)
CHART_DAYS = 30

_SINCE = re.compile(r"^(\d{1,5})([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def due_now(now: dt.datetime) -> Q:
    """Rows the dispatcher should be working on: due and not claimed."""
    return Q(status__in=DUE_STATUSES, next_attempt_at__lte=now)


def stuck_in_sending(now: dt.datetime) -> Q:
    """Rows claimed longer ago than the lease: their dispatcher died or hangs."""
    lease = dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS)
    return Q(status=Status.SENDING, claimed_at__lt=now - lease)


def oldest_due_at(now: dt.datetime) -> dt.datetime | None:
    """When the oldest row that is due and not claimed became due (the queue lag's start)."""
    return (
        Outbox.objects.filter(due_now(now))
        .order_by("next_attempt_at", "id")
        .values_list("next_attempt_at", flat=True)
        .first()
    )


def lag_seconds(now: dt.datetime, oldest: dt.datetime | None) -> int:
    """Seconds the oldest due row has waited; 0 when nothing waits."""
    return 0 if oldest is None else max(0, int((now - oldest).total_seconds()))


def parse_since(text: str) -> dt.timedelta | None:
    """`30m`, `1h`, `24h`, `7d` → a timedelta; `all` → None (all time). ValueError otherwise."""
    text = text.strip().lower()
    if text == ALL_TIME:
        return None
    match = _SINCE.match(text)
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"expected a window like 30m, 1h, 24h, 7d or 'all', got {text!r}")
    return dt.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@dataclass(frozen=True)
class DayCounts:
    day: dt.date
    sent: int = 0
    dropped: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.dropped + self.failed


@dataclass(frozen=True)
class OutboxStats:
    """A snapshot of the outbox at `now`. Counts are `[status][window]` and
    `[status][reason][window]`, with a key for every window asked for."""

    now: dt.datetime
    windows: tuple[str, ...]
    status: dict[str, dict[str, int]]
    # dropped / retry / failed → reason → window → count; only reasons seen at all
    reasons: dict[str, dict[str, dict[str, int]]]
    # channel → status → window → count; only channels seen at all
    channels: dict[str, dict[str, dict[str, int]]]
    oldest_due_at: dt.datetime | None
    stuck: int
    last_run: DispatchRun | None
    daily: list[DayCounts] = field(default_factory=list)

    @property
    def lag_seconds(self) -> int:
        """Age of the oldest row that is due and not yet claimed; 0 when nothing waits."""
        return lag_seconds(self.now, self.oldest_due_at)

    def as_json(self, window: str = ALL_TIME) -> dict:
        """The `outbox_stats --json` shape, for one window."""
        return {
            "status": {status: counts[window] for status, counts in self.status.items()},
            "reasons": {
                status: {
                    reason: counts[window] for reason, counts in by_reason.items() if counts[window]
                }
                for status, by_reason in self.reasons.items()
            },
            "channels": {
                channel: {status: counts[window] for status, counts in by_status.items()}
                for channel, by_status in self.channels.items()
            },
            "lag_seconds": self.lag_seconds,
            "stuck": self.stuck,
        }


def outbox_stats(
    *,
    now: dt.datetime | None = None,
    windows: Mapping[str, dt.timedelta | None] = WINDOWS,
    chart_days: int = CHART_DAYS,
) -> OutboxStats:
    """Count the outbox at `now` over `windows` (name → length, None for all time). With
    `chart_days`, also sent/dropped/failed per service day over that many days (today included).
    Settled rows older than the daily snapshot's boundary come from the snapshot
    (`outbox.reporting.summary`); everything else is counted live. About 10 small queries."""
    now = now or timezone.now()
    pairs, per_day = _counts(now, windows, chart_days)
    status, reasons, channels = _arrange(pairs, list(windows))
    return OutboxStats(
        now=now,
        windows=tuple(windows),
        status=status,
        reasons=reasons,
        channels=channels,
        oldest_due_at=oldest_due_at(now),
        stuck=Outbox.objects.filter(stuck_in_sending(now)).count(),
        last_run=DispatchRun.objects.order_by("-started_at").first(),
        daily=_daily(now, chart_days, per_day) if chart_days else [],
    )


# (status, reason, channel) → window → count
Pairs = dict[tuple[str, str, str], dict[str, int]]
PerDay = dict[tuple[dt.date, str], int]


def _counts(
    now: dt.datetime, windows: Mapping[str, dt.timedelta | None], chart_days: int
) -> tuple[Pairs, PerDay]:
    """Counts per (status, reason, channel) for each window, and per (service day, status) over the
    chart's days. With a usable snapshot (boundary B), settled rows are counted
    - since B: live, one pass over a day or two of the covering index `outbox_status_reason`
      (`COUNT … FILTER` per window and per chart day, so nothing is sorted);
    - before B: from the snapshot's days, plus, for a window starting inside a day before B,
      a live count of that day's part of it;
    and every other row (the queue and the failed rows: few) live, whole."""
    pairs: Pairs = {}
    per_day: PerDay = {}
    days = _day_ranges(now, chart_days)
    moving = [status for status in Status if status not in SETTLED]
    _add_live(pairs, per_day, Outbox.objects.filter(status__in=moving), now, windows, [])
    if days:
        # Failed rows per day: a few thousand index entries, grouped by their service day.
        failed = (
            Outbox.objects.filter(status=Status.FAILED, updated_at__gte=days[0][1])
            .annotate(day=LocalDate("updated_at", zone=DEDUP_ZONE))
            .order_by()
            .values_list("day")
            .annotate(n=Count("*"))
        )
        for day, n in failed:
            per_day[(_as_date(day), Status.FAILED.value)] = n
    settled = Outbox.objects.filter(status__in=SETTLED)
    snapshot = usable_snapshot(now)
    if snapshot is None:
        _add_live(pairs, per_day, settled, now, windows, days)
        return pairs, per_day
    # Naming every (status, reason, channel) lets the database seek, in each run of the
    # index, straight to a range of times, and group in the index's order. Reasons and
    # channels only ever come from their closed vocabularies.
    settled = settled.filter(reason__in=["", *Reason.values], channel__in=Channel.values)
    boundary = snapshot.boundary
    recent_windows = {
        name: (length if length is not None and now - length >= boundary else None)
        for name, length in windows.items()
    }
    recent_days = [(day, start, end) for day, start, end in days if start >= boundary]
    _add_live(
        pairs, per_day, settled.filter(updated_at__gte=boundary), now, recent_windows, recent_days
    )
    for key, n in snapshot_totals(snapshot).items():
        counts = pairs.setdefault(key, dict.fromkeys(windows, 0))
        for name, length in windows.items():
            if length is None:
                counts[name] += n
    # The snapshot's days a bounded window or the chart covers.
    starts = [now - length for length in windows.values() if length is not None]
    firsts = [service_day(start) for start in starts] + ([days[0][0]] if days else [])
    by_day = snapshot_days(snapshot, min(firsts)) if firsts else {}
    for (day, status_name, reason, channel), n in by_day.items():
        start = _day_start(day)
        counts = pairs.setdefault((status_name, reason, channel), dict.fromkeys(windows, 0))
        for name, length in windows.items():
            if length is not None and start >= now - length:
                counts[name] += n
        if days and day >= days[0][0]:
            per_day[(day, status_name)] = per_day.get((day, status_name), 0) + n
    # A window that starts inside a day before the boundary: that day's part of it, live.
    for name, length in windows.items():
        if length is None or now - length >= boundary:
            continue
        begin = now - length
        first = _day_start(service_day(begin))
        if begin == first:
            continue  # the window holds its first day whole: the snapshot's count, above
        end = first + dt.timedelta(days=1)
        rows = (
            settled.filter(updated_at__gte=begin, updated_at__lt=end)
            .order_by("status", "reason", "channel")
            .values_list("status", "reason", "channel")
            .annotate(n=Count("*"))
        )
        for status_name, reason, channel, n in rows:
            pairs.setdefault((status_name, reason, channel), dict.fromkeys(windows, 0))[name] += n
    return pairs, per_day


def _add_live(
    pairs: Pairs,
    per_day: PerDay,
    rows: QuerySet[Outbox],
    now: dt.datetime,
    windows: Mapping[str, dt.timedelta | None],
    days: list[tuple[dt.date, dt.datetime, dt.datetime]],
) -> None:
    """Add one GROUP BY (status, reason, channel) of `rows`: all of them into each window that is
    None (all time), those moved since its start into the others, and per chart day."""
    # COUNT(*) and counts of `updated_at` (never null): columns of the index, so PostgreSQL
    # answers from the index alone, as SQLite does (COUNT(id) would read every row).
    aggregates = {"n": Count("*")}
    for i, length in enumerate(windows.values()):
        if length is not None:
            aggregates[f"w{i}"] = Count("updated_at", filter=Q(updated_at__gte=now - length))
    for j, (_, start, end) in enumerate(days):
        aggregates[f"d{j}"] = Count(
            "updated_at", filter=Q(updated_at__gte=start, updated_at__lt=end)
        )
    grouped = rows.order_by("status", "reason", "channel").values("status", "reason", "channel")
    for row in grouped.annotate(**aggregates):
        key = (row["status"], row["reason"], row["channel"])
        counts = pairs.setdefault(key, dict.fromkeys(windows, 0))
        for i, (name, length) in enumerate(windows.items()):
            counts[name] += row["n"] if length is None else row[f"w{i}"]
        if row["status"] not in {s.value for s in CHART_STATUSES}:
            continue
        for j, (day, _, _) in enumerate(days):
            if row[f"d{j}"]:
                day_key = (day, row["status"])
                per_day[day_key] = per_day.get(day_key, 0) + row[f"d{j}"]


def _as_date(value) -> dt.date:
    # SQLite hands back the date() text as is.
    return dt.date.fromisoformat(value) if isinstance(value, str) else value


@functools.lru_cache(maxsize=512)
def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time.min, tzinfo=zoneinfo.ZoneInfo(DEDUP_ZONE))


def service_day(moment: dt.datetime) -> dt.date:
    return moment.astimezone(zoneinfo.ZoneInfo(DEDUP_ZONE)).date()


def _day_ranges(now: dt.datetime, days: int) -> list[tuple[dt.date, dt.datetime, dt.datetime]]:
    """(service day, its start, the next day's start) for the last `days` days, today last."""
    today = service_day(now)
    result = []
    for back in range(days - 1, -1, -1):
        start = _day_start(today - dt.timedelta(days=back))
        result.append((start.date(), start, start + dt.timedelta(days=1)))
    return result


def _arrange(
    pairs: Pairs, names: list[str]
) -> tuple[
    dict[str, dict[str, int]],
    dict[str, dict[str, dict[str, int]]],
    dict[str, dict[str, dict[str, int]]],
]:
    """Counts per status, per reason of the reasoned statuses (most frequent first), and
    per channel and status."""
    status: dict[str, dict[str, int]] = {s.value: dict.fromkeys(names, 0) for s in Status}
    reasons: dict[str, dict[str, dict[str, int]]] = {s.value: {} for s in REASONED}
    channels: dict[str, dict[str, dict[str, int]]] = {}
    for (status_name, reason, channel), counts in pairs.items():
        per_status = status.setdefault(status_name, dict.fromkeys(names, 0))
        per_channel = channels.setdefault(
            channel, {s.value: dict.fromkeys(names, 0) for s in Status}
        )
        per_channel_status = per_channel.setdefault(status_name, dict.fromkeys(names, 0))
        per_reason = (
            reasons[status_name].setdefault(reason, dict.fromkeys(names, 0))
            if status_name in reasons
            else None
        )
        for name, n in counts.items():
            per_status[name] += n
            per_channel_status[name] += n
            if per_reason is not None:
                per_reason[name] += n
    # Most frequent reason first: that is what staff look at.
    for status_name, by_reason in reasons.items():
        reasons[status_name] = dict(
            sorted(by_reason.items(), key=lambda item: (-max(item[1].values()), item[0]))
        )
    return status, reasons, dict(sorted(channels.items()))


def service_today(now: dt.datetime) -> dt.date:
    return service_day(now)


def _daily(now: dt.datetime, days: int, counts: dict[tuple[dt.date, str], int]) -> list[DayCounts]:
    first = service_today(now) - dt.timedelta(days=days - 1)
    wanted = {status.value for status in CHART_STATUSES}
    return [
        DayCounts(day, **{s: counts.get((day, s), 0) for s in wanted})
        for day in (first + dt.timedelta(days=i) for i in range(days))
    ]
