"""The outbox in numbers: what the admin overview shows, `manage.py outbox_stats` prints and
/metrics exposes.

A handful of queries, each answered from an index or a small table:
1. the settled rows (sent, dropped) that last moved before the daily snapshot's boundary —
   from the snapshot (`outbox.summary`), per service day, status and reason;
2. the settled rows that moved since — one GROUP BY over the covering index
   `outbox_status_reason` (status, reason, updated_at), seeking each (status, reason) run to
   the boundary, with `COUNT(…) FILTER (WHERE updated_at >= …)` per window (last hour, 24 h,
   7 days) and, for the chart, per service day;
3. every row in another status (the queue and the failed rows: few) — the same, whole;
4. the oldest due row (queue lag) — the queue rows only (`outbox_due`);
5. rows stuck in `sending` past the lease — the `sending` rows only;
6. the last dispatch cycle — the `dispatchrun_recent` index.

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
from outbox.models import (
    DEDUP_ZONE,
    DUE_STATUSES,
    SETTLED,
    CountSnapshot,
    DispatchRun,
    Outbox,
    Reason,
    Status,
)
from outbox.summary import usable_snapshot

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
    Settled rows older than the daily snapshot's boundary come from the snapshot
    (`outbox.summary`); everything else is counted live. Makes 8 queries."""
    now = now or timezone.now()
    longest = max((length for length in windows.values() if length is not None), default=None)
    snapshot = usable_snapshot(now, longest)
    pairs, days = _live_counts(now, windows, snapshot[0] if snapshot else None, chart_days)
    if snapshot is not None:
        for day, status_name, reason, n in snapshot[1]:
            counts = pairs.setdefault((status_name, reason), dict.fromkeys(windows, 0))
            for name, length in windows.items():
                if length is None:
                    counts[name] += n
            days[(day, status_name)] = days.get((day, status_name), 0) + n
    status, reasons = _arrange(pairs, list(windows))
    return OutboxStats(
        now=now,
        windows=tuple(windows),
        status=status,
        reasons=reasons,
        oldest_due_at=oldest_due_at(now),
        stuck=Outbox.objects.filter(stuck_in_sending(now)).count(),
        last_run=DispatchRun.objects.order_by("-started_at").first(),
        daily=_daily(now, chart_days, days) if chart_days else [],
    )


def _live_counts(
    now: dt.datetime,
    windows: Mapping[str, dt.timedelta | None],
    snapshot: CountSnapshot | None,
    chart_days: int,
) -> tuple[dict[tuple[str, str], dict[str, int]], dict[tuple[dt.date, str], int]]:
    """Live counts per (status, reason) for each window, and per (service day, status): the
    settled rows not in the `snapshot` (all of them without one), and every row in any
    other status. Each is one GROUP BY, the first two over the covering index
    `outbox_status_reason`, the last over the rows written since the snapshot."""
    settled = Outbox.objects.filter(status__in=SETTLED)
    querysets = [Outbox.objects.exclude(status__in=SETTLED)]
    if snapshot is None:
        querysets.append(settled)
    else:
        # Naming every (status, reason) pair lets the database seek, in each run of the
        # index, straight to the rows moved since the boundary: a week or so of rows
        # instead of all of them. Reasons only ever come from the closed vocabulary.
        querysets.append(
            settled.filter(reason__in=["", *Reason.values], updated_at__gte=snapshot.boundary)
        )
        querysets.append(settled.filter(id__gt=snapshot.last_id, updated_at__lt=snapshot.boundary))
    aggregates = {"n": Count("id")}
    for i, length in enumerate(windows.values()):
        if length is not None:
            aggregates[f"w{i}"] = Count("id", filter=Q(updated_at__gte=now - length))
    fields = ["status", "reason"]
    if chart_days:
        fields.append("day")
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    days: dict[tuple[dt.date, str], int] = {}
    for queryset in querysets:
        if chart_days:
            queryset = queryset.annotate(day=LocalDate("updated_at", zone=DEDUP_ZONE))
        for row in queryset.order_by().values(*fields).annotate(**aggregates):
            counts = pairs.setdefault((row["status"], row["reason"]), dict.fromkeys(windows, 0))
            for i, (name, length) in enumerate(windows.items()):
                counts[name] += row["n"] if length is None else row[f"w{i}"]
            if chart_days:
                key = (_as_date(row["day"]), row["status"])
                days[key] = days.get(key, 0) + row["n"]
    return pairs, days


def _arrange(
    pairs: dict[tuple[str, str], dict[str, int]], names: list[str]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, dict[str, int]]]]:
    """Counts per status, and per reason of the reasoned statuses, most frequent first."""
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
    return status, reasons


def service_today(now: dt.datetime) -> dt.date:
    return now.astimezone(zoneinfo.ZoneInfo(DEDUP_ZONE)).date()


def _daily(now: dt.datetime, days: int, counts: dict[tuple[dt.date, str], int]) -> list[DayCounts]:
    first = service_today(now) - dt.timedelta(days=days - 1)
    wanted = {status.value for status in CHART_STATUSES}
    return [
        DayCounts(day, **{s: counts.get((day, s), 0) for s in wanted})
        for day in (first + dt.timedelta(days=i) for i in range(days))
    ]


def _as_date(value) -> dt.date:
    # SQLite hands back the date() text as is.
    return dt.date.fromisoformat(value) if isinstance(value, str) else value
