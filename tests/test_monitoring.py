"""/metrics, /healthz and /readyz: who may read the metrics, that the outbox figures are the
ones `outbox_stats --json` prints, that counters add up across processes, and when the service
says it is not ready."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command
from django.utils.timezone import now as timezone_now
from prometheus_client.parser import text_string_to_metric_families

from common import counters
from monitoring import store
from monitoring.models import Counter
from outbox.dispatch import run_cycle
from outbox.models import Reason, Status
from tests.factories import DispatchRunFactory, ListingFactory, OutboxFactory, WatchFactory
from tests.outbox_states import row_in

ROOT = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)
TOKEN = "s3cret-scrape-token"


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    """GET /metrics and parse it: (sample name, sorted labels) → value."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


# --- who may read /metrics ------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_need_the_token_from_elsewhere(client, settings):
    settings.METRICS_TOKEN = TOKEN
    outside = {"REMOTE_ADDR": "203.0.113.7"}
    response = client.get("/metrics", **outside)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"yasugoro_" not in response.content
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope", **outside)
    assert wrong.status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}", **outside).status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **outside)


@pytest.mark.django_db
def test_metrics_from_this_host_need_no_token_unless_a_proxy_relayed_them(client, settings):
    settings.METRICS_TOKEN = ""
    assert scrape(client, REMOTE_ADDR="127.0.0.1")
    assert scrape(client, REMOTE_ADDR="::1")
    relayed = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.4")
    assert relayed.status_code == 401
    settings.METRICS_ALLOW_LOCALHOST = False
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("header", "proxy_header"),
    [
        # The README's TLS-terminating proxy (BEHIND_PROXY=1) may send only this one.
        ("HTTP_X_FORWARDED_PROTO", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("HTTP_X_FORWARDED_HOST", None),
        ("HTTP_X_FORWARDED_SCHEME", ("HTTP_X_FORWARDED_SCHEME", "https")),
        ("HTTP_X_SCHEME", ("HTTP_X_SCHEME", "https")),  # whatever header the setting names
    ],
)
def test_metrics_relayed_by_a_tls_proxy_need_the_token(client, settings, header, proxy_header):
    """A proxy on this host that names no client still relays the world's requests."""
    settings.METRICS_TOKEN = TOKEN
    settings.SECURE_PROXY_SSL_HEADER = proxy_header
    relayed = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **{header: "https"})
    assert relayed.status_code == 401
    assert b"yasugoro_" not in relayed.content
    assert scrape(
        client, REMOTE_ADDR="127.0.0.1", **{header: "https"}, HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
    )


@pytest.mark.django_db
def test_without_a_token_configured_no_header_opens_metrics(client, settings):
    settings.METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401


@pytest.mark.django_db
def test_probes_answer_by_ip_over_http_even_in_production(client, settings):
    """A load balancer asks by address over plain HTTP: no host check, no HTTPS redirect."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["yasugoro.example"]
    settings.METRICS_TOKEN = TOKEN
    for path in ("/healthz", "/readyz", "/metrics"):
        response = client.get(
            path, HTTP_HOST="10.0.0.12:8000", HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
        )
        assert response.status_code in (200, 503), path
        assert response["Cache-Control"] == "no-store"
    # everything else still gets both
    assert client.get("/", HTTP_HOST="yasugoro.example").status_code == 301
    assert client.get("/", HTTP_HOST="10.0.0.12:8000").status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_probes_take_only_get(client, path):
    response = client.post(path)
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"


# --- the figures ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_outbox_figures_are_the_ones_outbox_stats_prints(client, settings):
    with time_machine.travel(NOW, tick=False):
        for status, n in [(Status.SENT, 3), (Status.DROPPED, 2), (Status.FAILED, 1)]:
            for _ in range(n):
                row_in(status)
        OutboxFactory(next_attempt_at=NOW - dt.timedelta(minutes=7))  # due, waiting 7 min
        OutboxFactory(next_attempt_at=NOW + dt.timedelta(minutes=5))  # pending, not due
        OutboxFactory(
            status=Status.SENDING,
            reason=Reason.CLAIMED,
            claimed_at=NOW - dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS + 1),
        )
        out = StringIO()
        call_command("outbox_stats", "--json", stdout=out)
        stats = json.loads(out.getvalue())
        samples = scrape(client)
    for status, count in stats["status"].items():
        assert value(samples, "yasugoro_outbox_rows", status=status) == count, status
    assert stats["status"]["sent"] == 3 and stats["stuck"] == 1
    assert value(samples, "yasugoro_outbox_queue_lag_seconds") == stats["lag_seconds"] == 420
    assert value(samples, "yasugoro_outbox_stuck_rows") == stats["stuck"]
    assert value(samples, "yasugoro_outbox_due_rows") == 1


@pytest.mark.django_db
def test_outbox_figures_agree_with_outbox_stats_over_a_count_snapshot(client):
    from outbox.reporting.summary import refresh_snapshot

    watch = WatchFactory()
    for day in range(20):
        moved = timezone_now() - dt.timedelta(days=day)
        OutboxFactory(
            watch=watch,
            status=Status.SENT,
            reason=Reason.DELIVERED,
            detected_at=moved,
            updated_at=moved,
        )
    refresh_snapshot()
    out = StringIO()
    call_command("outbox_stats", "--json", stdout=out)
    stats = json.loads(out.getvalue())
    assert stats["status"]["sent"] == 20
    samples = scrape(client)
    for status, count in stats["status"].items():
        assert value(samples, "yasugoro_outbox_rows", status=status) == count, status


@pytest.mark.django_db
def test_poll_coverage_counts_listings_polled_within_two_intervals(client, settings):
    settings.POLL_MINUTES = 15
    with time_machine.travel(NOW, tick=False):
        ListingFactory.create_batch(3, last_polled_at=NOW - dt.timedelta(minutes=10))
        ListingFactory(last_polled_at=NOW - dt.timedelta(minutes=31))  # stale
        ListingFactory(last_polled_at=None)  # never
        ListingFactory(
            last_polled_at=NOW - dt.timedelta(minutes=40),
            last_error="network: timeout",
            last_error_at=NOW - dt.timedelta(minutes=2),
        )
        ListingFactory(paused=True, last_polled_at=None)  # not tracked: not counted
        samples = scrape(client)
    assert value(samples, "yasugoro_listings", state="active") == 6
    assert value(samples, "yasugoro_listings", state="covered") == 3
    assert value(samples, "yasugoro_listings", state="never") == 1
    assert value(samples, "yasugoro_listings", state="failing") == 1
    assert value(samples, "yasugoro_poll_coverage_ratio") == 0.5


@pytest.mark.django_db(transaction=True)
def test_a_dispatch_cycle_counts_transitions_durations_and_deliveries(client, recording_channel):
    listing = ListingFactory(price=900)
    for _ in range(3):
        row_in(Status.PENDING, watch=WatchFactory(listing=listing, target_price=1000))
    result = run_cycle()
    assert result.as_json()["sent"] == 3
    client.get("/healthz")  # any request flushes what the process counted
    samples = scrape(client)
    # enqueue is not a transition; the claim and the delivery are
    assert value(samples, "yasugoro_outbox_transitions_total", to="sending", reason="claimed") == 3
    assert value(samples, "yasugoro_outbox_transitions_total", to="sent", reason="delivered") == 3
    assert value(samples, "yasugoro_delivery_duration_seconds_count", channel="console") == 3
    assert (
        value(samples, "yasugoro_delivery_duration_seconds_bucket", channel="console", le="+Inf")
        == 3
    )
    assert value(samples, "yasugoro_dispatch_cycle_duration_seconds_count") == 1
    assert value(samples, "yasugoro_dispatch_last_cycle_timestamp_seconds") > 0
    # a second cycle adds to the same series
    run_cycle()
    client.get("/healthz")
    assert value(scrape(client), "yasugoro_dispatch_cycle_duration_seconds_count") == 2


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transition_is_not_counted(client):
    from django.db import transaction

    from outbox.transitions import Outcome, transition

    row = row_in(Status.PENDING)
    counters.discard_pending()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert transition([row.pk], Outcome(Status.DROPPED, Reason.MANUAL)) == [row.pk]
        raise RuntimeError("rolled back")
    assert not counters.has_pending()


@pytest.mark.django_db
def test_marketplace_requests_count_by_kind_and_application_id_fingerprint(client, ichiba):
    from tests.fakes.ichiba import APP_ID
    from watches.marketplaces.rakuten import RakutenMarketplace

    ichiba.add("shop:a", price=900)
    ichiba.behave["shop:b"] = "server"
    ichiba.behave["shop:c"] = "not_found"
    RakutenMarketplace().fetch(["shop:a", "shop:b", "shop:c", "shop:a2"])
    client.get("/healthz")
    response = client.get("/metrics")
    assert APP_ID not in response.content.decode()
    samples = scrape(client)
    app = counters.fingerprint(APP_ID)
    assert len(app) == 8

    def requests(kind: str) -> float:
        return value(
            samples,
            "yasugoro_marketplace_requests_total",
            source="rakuten",
            application_id=app,
            kind=kind,
        )

    assert (requests("ok"), requests("server"), requests("not_found")) == (1, 1, 1)
    assert requests("empty") == 1  # shop:a2: no offer


@pytest.mark.django_db
def test_a_configuration_fault_counts_once_for_its_one_request(client, ichiba, settings):
    from tests.fakes.ichiba import APP_ID
    from watches.marketplaces.rakuten import RakutenMarketplace

    settings.RAKUTEN_API_VERSION = "20220601"  # retired: every request would be refused
    RakutenMarketplace().fetch(["shop:a", "shop:b", "shop:c"])
    client.get("/healthz")
    samples = scrape(client)
    labels = {"source": "rakuten", "application_id": counters.fingerprint(APP_ID)}
    assert value(samples, "yasugoro_marketplace_requests_total", **labels, kind="config") == 1


@pytest.mark.django_db(transaction=True)
def test_counters_from_several_processes_add_up(tmp_path):
    """Four processes count and flush at the same moment, twice each: nothing is lost or
    counted twice (the upsert adds in the database, never read-modify-write)."""
    from tests.reliability.world import child_env

    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        import django
        django.setup()
        from common import counters
        from monitoring import store
        go = Path({str(tmp_path / "go")!r})
        while not go.exists():
            time.sleep(0.01)
        for round in range(2):
            for _ in range(250):
                counters.count(counters.TRANSITIONS, to="sent", reason="delivered")
            counters.observe(counters.DELIVERY_SECONDS, 0.2, channel="webpush")
            assert store.flush() == 1 + 8 + 2  # the total; 8 buckets (0.25…+Inf), sum, count
        """
    )
    children = [subprocess.Popen([sys.executable, "-c", script], env=child_env()) for _ in range(4)]
    (tmp_path / "go").touch()
    assert [child.wait(timeout=120) for child in children] == [0, 0, 0, 0]
    total = Counter.objects.get(name="yasugoro_outbox_transitions_total")
    assert total.value == 4 * 2 * 250
    count = Counter.objects.get(name="yasugoro_delivery_duration_seconds_count")
    assert count.value == 8


@pytest.mark.django_db
def test_a_failed_flush_keeps_the_counts_for_the_next(monkeypatch):
    from django.db import DatabaseError

    counters.count(counters.TRANSITIONS, 2, to="sent", reason="delivered")

    def down(amounts):
        raise DatabaseError("server closed the connection")

    monkeypatch.setattr(store, "_upsert", down)
    assert store.flush() == 0 and counters.has_pending()
    monkeypatch.undo()
    assert store.flush() == 1
    assert Counter.objects.get().value == 2


# --- health ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_says_the_process_answers(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_turns_503_when_no_cycle_ran_for_3_minutes(client):
    with time_machine.travel(NOW, tick=False):
        DispatchRunFactory(started_at=NOW, finished_at=NOW)
    with time_machine.travel(NOW + dt.timedelta(seconds=180), tick=False):
        response = client.get("/readyz")
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == "ok"
    with time_machine.travel(NOW + dt.timedelta(seconds=181), tick=False):
        response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["dispatcher"] == {
        "ok": False,
        "last_cycle_age_seconds": 181,
        "limit_seconds": 180,
    }
    assert body["checks"]["database"] == {"ok": True}


@pytest.mark.django_db
def test_readyz_is_503_before_any_cycle_ran(client):
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["dispatcher"]["last_cycle_age_seconds"] is None


@pytest.mark.django_db
def test_readyz_turns_503_when_the_queue_lags_past_the_limit(client, settings):
    settings.READYZ_MAX_QUEUE_LAG_SECONDS = 300
    with time_machine.travel(NOW, tick=False):
        DispatchRunFactory(started_at=NOW, finished_at=NOW)
        row = OutboxFactory(next_attempt_at=NOW - dt.timedelta(seconds=300))
        assert client.get("/readyz").status_code == 200
        row.next_attempt_at = NOW - dt.timedelta(seconds=301)
        row.save()
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["queue_lag"] == {
        "ok": False,
        "seconds": 301,
        "limit_seconds": 300,
    }


def test_readyz_is_503_when_the_database_is_unreachable_and_healthz_still_200():
    """A real process whose database refuses connections (nothing listens on port 1)."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import django
        django.setup()
        from django.test import Client
        client = Client()
        ready, alive = client.get("/readyz"), client.get("/healthz")
        metrics = client.get("/metrics")
        print(json.dumps([ready.status_code, ready.json(), alive.status_code,
                          metrics.status_code]))
        """
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "yasugoro.settings_test",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere",
        "LOG_LEVEL": "CRITICAL",
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    ready_status, body, alive_status, metrics_status = json.loads(
        done.stdout.strip().splitlines()[-1]
    )
    assert ready_status == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == {"ok": False, "error": "OperationalError"}
    assert body["checks"]["dispatcher"]["ok"] is False
    assert alive_status == 200
    assert metrics_status == 503


@pytest.mark.django_db
def test_a_django_q2_task_flushes_what_it_counted_in_its_worker():
    from django_q.signals import post_execute_in_worker

    counters.count(counters.TRANSITIONS, 3, to="sent", reason="delivered")
    post_execute_in_worker.send(sender="django_q", func=run_cycle, task={})
    assert not counters.has_pending()
    assert Counter.objects.get(name="yasugoro_outbox_transitions_total").value == 3


@pytest.mark.django_db(transaction=True)
def test_a_management_command_flushes_at_exit():
    """`manage.py dispatch_outbox` in a process of its own: its cycle's transitions reach
    the shared rows when it exits."""
    from tests.reliability.world import child_env

    listing = ListingFactory(price=900)
    row_in(Status.PENDING, watch=WatchFactory(listing=listing, target_price=1000))
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "dispatch_outbox", "--json"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sent"] == 1
    moved = dict(
        Counter.objects.filter(name="yasugoro_outbox_transitions_total").values_list(
            "labels", "value"
        )
    )
    assert moved == {'["sending","claimed"]': 1, '["sent","delivered"]': 1}
    assert Counter.objects.get(name="yasugoro_dispatch_cycle_duration_seconds_count").value == 1
