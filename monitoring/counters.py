"""What processes count for /metrics: transitions, marketplace requests, delivery and cycle
durations. Recording is in memory (cheap, safe from any thread); `flush` adds it to the
shared `Counter` rows in one short transaction. Processes flush after each request, after
each django-q2 task and at exit (`monitoring.hooks`), so /metrics sees every process of every
host. Counts a process made but had not flushed when it was killed are lost: a metric may
read a little low, never wrong in kind — a trade for never writing inside the outbox's
transactions (a shared counter row there would serialise every dispatcher's claims).

This module imports nothing from the apps it counts for, so any of them may call it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

log = logging.getLogger("monitoring.counters")


@dataclass(frozen=True)
class Metric:
    """A metric whose totals live in the Counter table. Counter series are stored under
    `name + "_total"`; a histogram's under `_bucket` (with `le`), `_sum` and `_count`."""

    name: str
    kind: str  # "counter" or "histogram"
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()


TRANSITIONS = Metric(
    "yasugoro_outbox_transitions",
    "counter",
    "Outbox rows moved by the state machine, by the status they moved to and why.",
    ("to", "reason"),
)
MARKETPLACE_REQUESTS = Metric(
    "yasugoro_marketplace_requests",
    "counter",
    "Requests to a marketplace API by outcome kind (ok, empty, not_found, rate_limited, "
    "network, server, bad_response, config) and application id (a fingerprint: the first 8 hex "
    "digits of its SHA-256, never the id itself).",
    ("source", "application_id", "kind"),
)
DELIVERY_SECONDS = Metric(
    "yasugoro_delivery_duration_seconds",
    "histogram",
    "How long one delivery took on its channel (for Web Push: the push service's answer).",
    ("channel",),
    (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
CYCLE_SECONDS = Metric(
    "yasugoro_dispatch_cycle_duration_seconds",
    "histogram",
    "How long one dispatcher cycle took, from start to its record.",
    (),
    (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0),
)
METRICS = (TRANSITIONS, MARKETPLACE_REQUESTS, DELIVERY_SECONDS, CYCLE_SECONDS)

_lock = threading.Lock()
_pending: dict[tuple[str, str], float] = defaultdict(float)


def labels_key(values: list[Any]) -> str:
    """The canonical text of a series' label values, in the metric's label order."""
    return json.dumps([str(v) for v in values], ensure_ascii=False, separators=(",", ":"))


def _add(series: str, values: list[Any], amount: float) -> None:
    with _lock:
        _pending[(series, labels_key(values))] += amount


def count(metric: Metric, amount: float = 1, **labels: Any) -> None:
    _add(f"{metric.name}_total", [labels[name] for name in metric.labels], amount)


def observe(metric: Metric, value: float, **labels: Any) -> None:
    keys = _histogram_keys(metric, tuple(str(labels[name]) for name in metric.labels))
    with _lock:
        for bound, bucket in keys.buckets:
            if value <= bound:
                _pending[bucket] += 1
        _pending[keys.sum] += value
        _pending[keys.count] += 1


@dataclass(frozen=True)
class _HistogramKeys:
    buckets: tuple[tuple[float, tuple[str, str]], ...]  # (upper bound, pending key)
    sum: tuple[str, str]
    count: tuple[str, str]


@functools.lru_cache(maxsize=1024)
def _histogram_keys(metric: Metric, values: tuple[str, ...]) -> _HistogramKeys:
    # A delivery is observed once per row: building a dozen JSON keys for each was a sixth
    # of a dispatch cycle's CPU. The series of one (metric, labels) never change.
    labels = labels_key(list(values))
    return _HistogramKeys(
        buckets=tuple(
            (bound, (f"{metric.name}_bucket", labels_key([*values, bound])))
            for bound in (*metric.buckets, float("inf"))
        ),
        sum=(f"{metric.name}_sum", labels),
        count=(f"{metric.name}_count", labels),
    )


# --- what the apps call -----------------------------------------------------------------


def count_transition(to: Any, reason: Any, moved: int) -> None:
    """`moved` rows went to `to` for `reason` — counted once the transaction commits (a
    rolled-back move never happened)."""
    if moved:
        transaction.on_commit(
            lambda: count(TRANSITIONS, moved, to=_value(to), reason=_value(reason) or "none")
        )


def count_marketplace_request(source: str, application_id: str, result: Any) -> None:
    """One request answered `result`: an observation ("ok") or an error with a `kind`."""
    kind = getattr(result, "kind", None)
    count(
        MARKETPLACE_REQUESTS,
        source=source,
        application_id=fingerprint(application_id),
        kind=_value(kind) if kind is not None else "ok",
    )


@contextlib.contextmanager
def delivery_timer(channel: str) -> Iterator[None]:
    """Times one delivery on `channel`, whatever its outcome."""
    started = time.perf_counter()
    try:
        yield
    finally:
        observe(DELIVERY_SECONDS, time.perf_counter() - started, channel=channel)


def observe_dispatch_cycle(seconds: float) -> None:
    observe(CYCLE_SECONDS, max(0.0, seconds))


def fingerprint(secret: str) -> str:
    """A stable, short name for a credential, safe to show: operators find theirs with
    `printf %s "$RAKUTEN_APP_ID" | sha256sum | cut -c1-8`."""
    return hashlib.sha256(secret.encode()).hexdigest()[:8]


def _value(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


# --- flushing ---------------------------------------------------------------------------


def has_pending() -> bool:
    return bool(_pending)


def discard_pending() -> None:
    """Forget what was counted and not flushed (tests start from nothing)."""
    with _lock:
        _pending.clear()


def flush() -> int:
    """Add what this process counted to the shared rows; returns how many series moved.
    Never raises: a database that is down keeps the counts for the next flush."""
    with _lock:
        if not _pending:
            return 0
        taken = dict(_pending)
        _pending.clear()
    try:
        _upsert(taken)
    except Exception:
        log.warning("metrics flush failed; kept for the next one", exc_info=True)
        with _lock:
            for key, amount in taken.items():
                _pending[key] += amount
        return 0
    return len(taken)


def _upsert(amounts: dict[tuple[str, str], float]) -> None:
    from monitoring.models import Counter

    table = connection.ops.quote_name(Counter._meta.db_table)
    now = Counter._meta.get_field("updated_at").get_db_prep_save(timezone.now(), connection)
    # In one order everywhere, so two processes flushing at once never deadlock.
    rows = [(name, labels, amount, now) for (name, labels), amount in sorted(amounts.items())]
    sql = (
        f"INSERT INTO {table} (name, labels, value, updated_at) VALUES (%s, %s, %s, %s) "  # noqa: S608
        f"ON CONFLICT (name, labels) DO UPDATE SET value = {table}.value + excluded.value, "
        "updated_at = excluded.updated_at"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)
