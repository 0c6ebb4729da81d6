"""What processes count for /metrics: transitions, marketplace requests, delivery and cycle
durations. Recording is in memory (cheap, safe from any thread); `monitoring.store.flush`
adds it to the shared `Counter` rows in one short transaction. Processes flush after each
request, after each django-q2 task and at exit (`monitoring.hooks`), so /metrics sees every
process of every host. Counts a process made but had not flushed when it was killed are
lost: a metric may read a little low, never wrong in kind — a trade for never writing inside
the outbox's transactions (a shared counter row there would serialise every dispatcher's
claims).

This module imports no app, so every app may call it: it is a leaf, like the rest of
`common/`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction


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


def take_pending() -> dict[tuple[str, str], float]:
    """What this process counted since the last take, forgotten here: the caller stores it
    (`monitoring.store.flush`), or gives it back when it could not."""
    with _lock:
        taken = dict(_pending)
        _pending.clear()
    return taken


def give_back(taken: dict[tuple[str, str], float]) -> None:
    """Counts a flush could not store, kept for the next one."""
    with _lock:
        for key, amount in taken.items():
            _pending[key] += amount
