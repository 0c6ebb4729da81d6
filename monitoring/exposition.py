"""/metrics in the Prometheus text format, read from the database at scrape time.

Why the database and not prometheus_client's multiprocess mode: Yasugoro's processes are
gunicorn workers on web hosts and qcluster processes on worker hosts that serve no HTTP.
Multiprocess mode only adds up processes sharing one directory on one host, so the
dispatcher's counts would be on no page Prometheus can scrape, and its files need cleaning
when workers restart. Here every web process answers the same figures for the whole service:
the gauges are counted from the outbox and listing tables (the queries the admin overview
already makes fast), the counters and histograms are the `Counter` rows every process adds
to (`common.counters`). One scrape costs about what one overview costs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Count, F, Q
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from common import counters
from monitoring.models import Counter
from outbox.models import Outbox, Status
from outbox.reporting.stats import due_now, outbox_stats
from watches.marketplaces import halts
from watches.models import Listing

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render() -> bytes:
    """The whole exposition, every figure read now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return generate_latest(registry)


class _Collector:
    def collect(self) -> Iterable[Metric]:
        now = timezone.now()
        yield from outbox_gauges(now)
        yield from poll_gauges(now)
        yield from halt_gauges()
        yield from stored_totals()


def outbox_gauges(now: dt.datetime) -> Iterable[Metric]:
    stats = outbox_stats(now=now, windows={"all": None}, chart_days=0)
    rows = GaugeMetricFamily(
        "yasugoro_outbox_rows", "Outbox rows in each status, now.", labels=["status"]
    )
    for status in Status:
        rows.add_metric([status.value], stats.status[status.value]["all"])
    yield rows
    yield GaugeMetricFamily(
        "yasugoro_outbox_due_rows",
        "Rows due now and not claimed (pending or retry, next attempt passed).",
        value=Outbox.objects.filter(due_now(now)).count(),
    )
    yield GaugeMetricFamily(
        "yasugoro_outbox_queue_lag_seconds",
        "Age of the oldest row that is due and not claimed; 0 when nothing waits.",
        value=stats.lag_seconds,
    )
    yield GaugeMetricFamily(
        "yasugoro_outbox_stuck_rows",
        "Rows in sending for longer than the lease (their dispatcher died or hangs).",
        value=stats.stuck,
    )
    run = stats.last_run
    yield GaugeMetricFamily(
        "yasugoro_dispatch_last_cycle_timestamp_seconds",
        "When the last dispatch cycle started (Unix time); 0 when none ever ran.",
        value=run.started_at.timestamp() if run else 0,
    )
    yield GaugeMetricFamily(
        "yasugoro_dispatch_last_cycle_failed",
        "1 when the last dispatch cycle stopped on an error.",
        value=1 if run and run.error else 0,
    )


def poll_gauges(now: dt.datetime) -> Iterable[Metric]:
    """Poll coverage: of the listings being tracked, how many were polled within two
    polling intervals (the admin's "stale" line), and how many are failing."""
    fresh = now - 2 * dt.timedelta(minutes=settings.POLL_MINUTES)
    failing = Q(last_error_at__isnull=False) & (
        Q(last_polled_at__isnull=True) | Q(last_error_at__gt=F("last_polled_at"))
    )
    counts = Listing.objects.filter(paused=False).aggregate(
        active=Count("id"),
        covered=Count("id", filter=Q(last_polled_at__gte=fresh)),
        failing=Count("id", filter=failing),
        never=Count("id", filter=Q(last_polled_at__isnull=True)),
    )
    listings = GaugeMetricFamily(
        "yasugoro_listings",
        "Tracked (not paused) listings: all, polled within two polling intervals, whose last "
        "poll failed, never polled.",
        labels=["state"],
    )
    for state in ("active", "covered", "failing", "never"):
        listings.add_metric([state], counts[state])
    yield listings
    yield GaugeMetricFamily(
        "yasugoro_poll_coverage_ratio",
        "Share of tracked listings polled within two polling intervals (1 when none is tracked).",
        value=counts["covered"] / counts["active"] if counts["active"] else 1.0,
    )


def halt_gauges() -> Iterable[Metric]:
    """1 for each marketplace halted for a configuration fault, 0 for each other configured
    one: beside `yasugoro_marketplace_requests_total{kind="config"}`, which counts the few
    requests (the first, then one probe an interval) that found it so."""
    halted = {halt.source: halt for halt in halts.current()}
    gauge = GaugeMetricFamily(
        "yasugoro_marketplace_halted",
        "1 while the marketplace is halted for a configuration fault: nothing is asked of it "
        "but one probe every MARKETPLACE_PROBE_SECONDS (/readyz says what to fix).",
        labels=["source"],
    )
    since = GaugeMetricFamily(
        "yasugoro_marketplace_halted_since_timestamp_seconds",
        "When the marketplace's halt began (Unix time); only for halted marketplaces.",
        labels=["source"],
    )
    for source in sorted({*settings.MARKETPLACE_ADAPTERS, *halted}):
        halt = halted.get(source)
        gauge.add_metric([source], 1 if halt else 0)
        if halt:
            since.add_metric([source], halt.since.timestamp())
    yield gauge
    yield since


def stored_totals() -> Iterable[Metric]:
    """The counters and histograms every process adds to, each family listed even before
    anything was counted."""
    series: dict[str, list[tuple[list[str], float]]] = defaultdict(list)
    for name, labels, value in Counter.objects.values_list("name", "labels", "value"):
        series[name].append((json.loads(labels) if labels else [], value))
    for metric in counters.METRICS:
        if metric.kind == "counter":
            family = CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for values, total in sorted(series[f"{metric.name}_total"]):
                family.add_metric(values, total)
            yield family
        else:
            yield _histogram(metric, series)


def _histogram(metric: counters.Metric, series: dict) -> Metric:
    family = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    buckets: dict[tuple[str, ...], dict[float, float]] = defaultdict(dict)
    for values, n in series[f"{metric.name}_bucket"]:
        *label_values, bound = values
        buckets[tuple(label_values)][float(bound)] = n
    sums = {tuple(values): total for values, total in series[f"{metric.name}_sum"]}
    for label_values in sorted(buckets):
        known = buckets[label_values]
        # Stored cumulative already: every observation counted in each bucket above it.
        bounds = [*metric.buckets, float("inf")]
        family.add_metric(
            list(label_values),
            [(floatToGoString(b), known.get(b, 0.0)) for b in bounds],
            sum_value=sums.get(label_values, 0.0),
        )
    return family
