"""The outbox in numbers: what the admin overview shows and `manage.py outbox_stats` prints.

Everything comes from a handful of aggregate queries, each answered from an index:
1. all-time counts per (status, reason) — one GROUP BY over the covering index
   `outbox_status_reason` (status, reason, updated_at), never the table;
2. the same per window (last hour, 24 h, 7 days) — `COUNT(…) FILTER (WHERE updated_at >= …)`
   over only the entries that moved within the longest window, found by seeking each
   (status, reason) run of that index;
3. the oldest due row (queue lag) — the queue rows only (`outbox_due`, or on SQLite the
   pending/retry part of `outbox_status_reason`);
4. rows stuck in `sending` past the lease — the `sending` rows only;
5. the last dispatch cycle — the `dispatchrun_recent` index;
6. (with the chart) sent / dropped / failed per service day over 30 days — the last 30 days
   of each (status, reason) run of `outbox_status_reason`.

A row is counted in a window by when it last changed status (`updated_at`, written by every
transition): "dropped in the last hour" means rows that were dropped in the last hour.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from outbox.expressions import LocalDate
from outbox.models import DEDUP_ZONE, DUE_STATUSES, DispatchRun, Outbox, Status

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
    Makes 4 queries, one more with windows other than all time, one more with the chart."""
    now = now or timezone.now()
    status, reasons, seen = _counts(now, windows)
    oldest = oldest_due_at(now)
    stuck = Outbox.objects.filter(stuck_in_sending(now)).count()
    last_run = DispatchRun.objects.order_by("-started_at").first()
    return OutboxStats(
        now=now,
        windows=tuple(windows),
        status=status,
        reasons=reasons,
        oldest_due_at=oldest,
        stuck=stuck,
        last_run=last_run,
        daily=_daily(now, chart_days, seen) if chart_days else [],
    )


def _counts(
    now: dt.datetime, windows: Mapping[str, dt.timedelta | None]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, dict[str, int]]], set[tuple[str, str]]]:
    """Counts per status and per reason of the reasoned statuses, and every (status, reason)
    pair present."""
    names = list(windows)
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    # All time: the whole covering index, counted and nothing else.
    for row in Outbox.objects.order_by().values("status", "reason").annotate(n=Count("id")):
        pairs[(row["status"], row["reason"])] = {
            name: row["n"] if windows[name] is None else 0 for name in names
        }
    # The windows: naming the pairs present lets the database seek, in each (status, reason)
    # run of the index, straight to the rows moved within the longest window; the shorter
    # windows are filters on those few. On a million rows in SQLite: 115 ms for both queries
    # where one query filtering every index entry took 230 ms.
    bounded = {name: length for name, length in windows.items() if length is not None}
    if bounded and pairs:
        aggregates = {
            f"w{i}": Count("id", filter=Q(updated_at__gte=now - length))
            for i, length in enumerate(bounded.values())
        }
        rows = (
            Outbox.objects.filter(
                status__in=sorted({status for status, _ in pairs}),
                reason__in=sorted({reason for _, reason in pairs}),
                updated_at__gte=now - max(bounded.values()),
            )
            .order_by()
            .values("status", "reason")
            .annotate(**aggregates)
        )
        for row in rows:
            counts = pairs.setdefault((row["status"], row["reason"]), dict.fromkeys(names, 0))
            for i, name in enumerate(bounded):
                counts[name] = row[f"w{i}"]

    status: dict[str, dict[str, int]] = {s.value: dict.fromkeys(names, 0) for s in Status}
    reasons: dict[str, dict[str, dict[str, int]]] = {s.value: {} for s in REASONED}
    for (status_name, reason), counts in pairs.items():
        per_status = status.setdefault(status_name, dict.fromkeys(names, 0))
        for name, n in counts.items():
            per_status[name] += n
        if status_name in reasons:
            reasons[status_name][reason] = counts
    # Most frequent reason first: that is what staff look at.
    for status_name, by_reason in reasons.items():
        reasons[status_name] = dict(
            sorted(by_reason.items(), key=lambda item: (-max(item[1].values()), item[0]))
        )
    return status, reasons, set(pairs)


def service_today(now: dt.datetime) -> dt.date:
    return now.astimezone(zoneinfo.ZoneInfo(DEDUP_ZONE)).date()


def _daily(now: dt.datetime, days: int, seen: set[tuple[str, str]]) -> list[DayCounts]:
    zone = zoneinfo.ZoneInfo(DEDUP_ZONE)
    first = service_today(now) - dt.timedelta(days=days - 1)
    start = dt.datetime.combine(first, dt.time.min, tzinfo=zone)
    # Naming the reasons present lets the database seek straight to the last 30 days of each
    # (status, reason) run of the index instead of reading every terminal row's entry:
    # 175 ms instead of 245 ms on a million rows in SQLite.
    reasons = sorted({reason for status, reason in seen if status in CHART_STATUSES})
    counts: dict[dt.date, dict[str, int]] = {}
    if reasons:
        rows = (
            Outbox.objects.filter(
                status__in=CHART_STATUSES, reason__in=reasons, updated_at__gte=start
            )
            .annotate(day=LocalDate("updated_at", zone=DEDUP_ZONE))
            .order_by()
            .values("status", "day")
            .annotate(n=Count("id"))
        )
        for row in rows:
            day = row["day"]
            if isinstance(day, str):  # SQLite hands back the date() text as is
                day = dt.date.fromisoformat(day)
            counts.setdefault(day, {})[row["status"]] = row["n"]
    return [
        DayCounts(day, **counts.get(day, {}))
        for day in (first + dt.timedelta(days=i) for i in range(days))
    ]
