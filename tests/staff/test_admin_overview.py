"""The outbox overview: counts per status and per reason over the windows, queue lag, stuck
rows, the last dispatch cycle and the 30-day chart — and the `outbox_stats` command that
prints the same numbers."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone

from outbox.models import Reason, Status
from outbox.reporting.overview import short_duration
from outbox.reporting.stats import WINDOWS, outbox_stats, parse_since
from tests.factories import DispatchRunFactory, ListingFactory, OutboxFactory, WatchFactory
from tests.fakes.ichiba import APP_ID
from watches.marketplaces.ratelimit import app_id_label
from watches.models import Channel

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)  # 12:00 in Tokyo
OVERVIEW_URL = "/admin/outbox/outbox/overview/"
CHANGELIST_URL = "/admin/outbox/outbox/"


def ago(**delta) -> dt.datetime:
    return NOW - dt.timedelta(**delta)


def seed_mix() -> None:
    """A mix of rows whose status changed at known times before NOW."""
    watch = WatchFactory()
    # One watch is enough: the dedup index holds one live row per watch and day, and each
    # row here is detected on a day of its own.
    days = itertools.count(1)

    def rows(n: int, status: Status, reason: str = "", *, moved: dt.datetime, **extra) -> None:
        row_watch = extra.pop("watch", watch)
        for _ in range(n):
            detected = NOW - dt.timedelta(days=next(days))
            OutboxFactory(
                watch=row_watch,
                status=status,
                reason=reason,
                detected_at=detected,
                created_at=detected,
                updated_at=moved,
                **extra,
            )

    rows(2, Status.PENDING, moved=ago(minutes=10), next_attempt_at=ago(minutes=10))
    rows(1, Status.PENDING, moved=ago(days=3), next_attempt_at=ago(days=3))  # lag: 3 days
    rows(1, Status.SENDING, Reason.CLAIMED, moved=ago(minutes=1), claimed_at=ago(minutes=1))
    # Another watch: one row per watch and channel may be in flight (a unique index).
    rows(
        1,
        Status.SENDING,
        Reason.CLAIMED,
        moved=ago(minutes=10),
        claimed_at=ago(minutes=10),
        watch=WatchFactory(),
    )
    rows(
        2,
        Status.RETRY,
        Reason.REFETCH_NETWORK,
        moved=ago(minutes=30),
        next_attempt_at=NOW + dt.timedelta(minutes=5),
    )
    rows(1, Status.RETRY, Reason.DELIVER_SERVER, moved=ago(days=2), next_attempt_at=ago(days=2))
    rows(3, Status.SENT, Reason.DELIVERED, moved=ago(minutes=5))
    rows(2, Status.SENT, Reason.DELIVERED, moved=ago(hours=2))
    rows(4, Status.SENT, Reason.DELIVERED, moved=ago(days=3))
    rows(1, Status.SENT, Reason.DELIVERED, moved=ago(days=40))
    rows(2, Status.DROPPED, Reason.CONDITION_LOST, moved=ago(minutes=20))
    rows(1, Status.DROPPED, Reason.MANUAL, moved=ago(hours=5))
    rows(1, Status.DROPPED, Reason.OUT_OF_STOCK, moved=ago(days=10))
    rows(1, Status.FAILED, Reason.DELIVER_REJECTED, moved=ago(minutes=50))
    rows(1, Status.FAILED, Reason.LEASE_EXPIRED, moved=ago(days=8))
    DispatchRunFactory(started_at=ago(minutes=2), claimed=5, sent=3, dropped=1, retry=1)
    DispatchRunFactory(started_at=ago(minutes=1), claimed=2, sent=2)


EXPECTED_STATUS = {
    #           1h  24h  7d  all
    "pending": (2, 2, 3, 3),
    "sending": (2, 2, 2, 2),
    "retry": (2, 2, 3, 3),
    "sent": (3, 5, 9, 10),
    "dropped": (2, 3, 3, 4),
    "failed": (1, 1, 1, 2),
}
EXPECTED_REASONS = {
    "dropped": {
        "condition_lost": (2, 2, 2, 2),
        "manual": (0, 1, 1, 1),
        "out_of_stock": (0, 0, 0, 1),
    },
    "retry": {"refetch_network": (2, 2, 2, 2), "deliver_server": (0, 0, 1, 1)},
    "failed": {"deliver_rejected": (1, 1, 1, 1), "lease_expired": (0, 0, 0, 1)},
}


@pytest.fixture
def seeded():
    with time_machine.travel(NOW, tick=False):
        seed_mix()
        yield


def as_tuple(counts: dict[str, int]) -> tuple[int, ...]:
    return tuple(counts[w] for w in WINDOWS)


def test_stats_count_per_status_and_reason_over_each_window(seeded):
    stats = outbox_stats()
    assert {s: as_tuple(c) for s, c in stats.status.items()} == EXPECTED_STATUS
    assert {
        s: {r: as_tuple(c) for r, c in by_reason.items()} for s, by_reason in stats.reasons.items()
    } == EXPECTED_REASONS
    assert stats.lag_seconds == 3 * 24 * 3600  # the 3-day-old pending row
    assert stats.stuck == 1  # claimed 10 min ago; the lease is 5 min
    assert stats.last_run.sent == 2  # the newest cycle


def test_overview_page_shows_the_counts_with_links_to_the_filtered_changelist(admin_client, seeded):
    response = admin_client.get(OVERVIEW_URL)
    assert response.status_code == 200
    overview = response.context["overview"]
    shown = {row.key: tuple(cell.count for cell in row.cells) for row in overview.status_rows}
    assert shown == EXPECTED_STATUS
    tables = {
        t.status: {r.key: tuple(c.count for c in r.cells) for r in t.rows}
        for t in overview.reason_tables
    }
    assert tables == EXPECTED_REASONS
    html = response.content.decode()
    # each count links to exactly the rows it counts
    assert (
        'href="/admin/outbox/outbox/?status__exact=dropped&amp;reason__exact=manual&amp;since=24h">1</a>'
        in html
    )
    assert 'href="/admin/outbox/outbox/?status__exact=sent&amp;since=7d">9</a>' in html
    assert 'href="/admin/outbox/outbox/?queue=due"' in html
    assert 'href="/admin/outbox/outbox/?queue=stuck">1</a>' in html
    assert "3 d" in html  # the queue lag
    assert "<svg" in html


def test_every_overview_link_lists_exactly_the_rows_it_counts(admin_client, seeded):
    with time_machine.travel(NOW, tick=False):
        overview = admin_client.get(OVERVIEW_URL).context["overview"]
        cells = [c for row in overview.status_rows for c in row.cells]
        cells += [c for t in overview.reason_tables for row in t.rows for c in row.cells]
        cells += [c for t in overview.channel_tables for row in t.rows for c in row.cells]
        for cell in cells:
            listed = admin_client.get(cell.url).context["cl"].result_count
            assert listed == cell.count, cell.url
        assert admin_client.get(overview.stuck_url).context["cl"].result_count == 1
        assert admin_client.get(overview.due_url).context["cl"].result_count == 4


def test_overview_is_at_the_top_of_the_changelist(admin_client, seeded):
    response = admin_client.get(CHANGELIST_URL)
    html = response.content.decode()
    assert html.index('class="ob-overview"') < html.index('id="changelist"')


def test_admin_index_links_to_the_overview(admin_client):
    response = admin_client.get("/admin/")
    assert f'href="{OVERVIEW_URL}"' in response.content.decode()


def test_chart_counts_per_service_day_in_tokyo():
    with time_machine.travel(NOW, tick=False):
        watch = WatchFactory()
        # 2026-03-09 15:30 UTC is already 2026-03-10 00:30 in Tokyo.
        moments = [
            (Status.SENT, dt.datetime(2026, 3, 9, 15, 30, tzinfo=dt.UTC)),
            (Status.SENT, dt.datetime(2026, 3, 9, 14, 30, tzinfo=dt.UTC)),  # 03-09 23:30 JST
            (Status.DROPPED, dt.datetime(2026, 3, 10, 1, 0, tzinfo=dt.UTC)),
            # The 30 days run from 02-09 to 03-10 in Tokyo.
            (Status.FAILED, dt.datetime(2026, 2, 8, 15, 30, tzinfo=dt.UTC)),  # 02-09 00:30 JST
            (Status.SENT, dt.datetime(2026, 2, 8, 14, 30, tzinfo=dt.UTC)),  # 02-08 23:30 JST
        ]
        for i, (status, moved) in enumerate(moments):
            OutboxFactory(
                watch=watch, status=status, reason="x", detected_at=ago(days=i), updated_at=moved
            )
        daily = {d.day: (d.sent, d.dropped, d.failed) for d in outbox_stats().daily}
    assert len(daily) == 30
    assert daily[dt.date(2026, 3, 10)] == (1, 1, 0)
    assert daily[dt.date(2026, 3, 9)] == (1, 0, 0)
    assert daily[dt.date(2026, 2, 9)] == (0, 0, 1)  # the first day of the 30
    assert dt.date(2026, 2, 8) not in daily
    assert sum(sent + dropped + failed for sent, dropped, failed in daily.values()) == 4


def test_overview_with_an_empty_outbox(admin_client):
    response = admin_client.get(OVERVIEW_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "no dispatcher has run yet" in html
    assert response.context["overview"].lag_text == "none"


def test_overview_warns_when_the_dispatcher_is_silent_or_failing(admin_client):
    DispatchRunFactory(started_at=timezone.now() - dt.timedelta(minutes=30))
    assert admin_client.get(OVERVIEW_URL).context["overview"].last_run_silent
    DispatchRunFactory(error="OperationalError: database is locked")
    html = admin_client.get(OVERVIEW_URL).content.decode()
    assert "OperationalError: database is locked" in html


# --- query counts -------------------------------------------------------------------------


def test_overview_makes_a_handful_of_queries(django_assert_num_queries, seeded):
    # the snapshot (none usable here), the queue and failed rows, failed per day, the
    # settled rows, lag, stuck, last run
    with django_assert_num_queries(7):
        outbox_stats(now=NOW)


def test_overview_page_query_count(admin_client, django_assert_num_queries, seeded):
    admin_client.get(OVERVIEW_URL)  # warm the session
    # session, user, the seven of the overview, the halted marketplaces, the coverage of
    # watched listings
    with django_assert_num_queries(11):
        assert admin_client.get(OVERVIEW_URL).status_code == 200


def test_changelist_of_a_full_page_query_count(admin_client, django_assert_max_num_queries):
    with time_machine.travel(NOW, tick=False):
        for i in range(60):
            OutboxFactory(status=[Status.SENT, Status.DROPPED, Status.RETRY][i % 3], reason="x")
        admin_client.get(CHANGELIST_URL)
        # session, user, capped count, page ids, page rows with their joins, the overview's
        # seven — and nothing per row.
        with django_assert_max_num_queries(12):
            response = admin_client.get(CHANGELIST_URL)
    assert len(response.context["cl"].result_list) == 50


# --- the command --------------------------------------------------------------------------


def run_stats(*args: str) -> str:
    out = StringIO()
    call_command("outbox_stats", *args, stdout=out)
    return out.getvalue()


def test_outbox_stats_json_agrees_with_the_overview(admin_client, seeded):
    with time_machine.travel(NOW, tick=False):
        overview = admin_client.get(OVERVIEW_URL).context["overview"]
        for window in ("1h", "24h", "7d", "all"):
            args = ["--json"] if window == "all" else ["--json", "--since", window]
            printed = run_stats(*args)
            data = json.loads(printed)  # exactly one JSON object
            column = list(WINDOWS).index(window)
            assert data["status"] == {
                row.key: row.cells[column].count for row in overview.status_rows
            }
            assert data["reasons"] == {
                t.status: {r.key: r.cells[column].count for r in t.rows if r.cells[column].count}
                for t in overview.reason_tables
            }
            assert {
                channel: {key: n for key, n in counts.items() if n}
                for channel, counts in data["channels"].items()
            } == {
                t.status: {r.key: r.cells[column].count for r in t.rows if r.cells[column].count}
                for t in overview.channel_tables
            }
            assert data["lag_seconds"] == overview.lag_seconds == 3 * 24 * 3600
            assert data["stuck"] == overview.stuck == 1
    assert set(data) == {"status", "reasons", "channels", "lag_seconds", "stuck"}
    assert set(data["reasons"]) == {"dropped", "retry", "failed"}


def test_outbox_stats_prints_counts_for_people(seeded):
    with time_machine.travel(NOW, tick=False):
        text = run_stats("--since", "24h")
    assert "sent" in text and "condition_lost" in text
    assert "queue lag: 259200 s" in text
    assert "stuck in sending past the lease: 1" in text
    assert "last dispatch cycle" in text


@pytest.mark.parametrize("bad", ["yesterday", "0h", "24", "-1d", "1w", ""])
def test_outbox_stats_refuses_a_bad_window(bad):
    with pytest.raises(CommandError, match="--since"):
        run_stats("--since", bad)


def test_parse_since():
    assert parse_since("30m") == dt.timedelta(minutes=30)
    assert parse_since("24h") == dt.timedelta(hours=24)
    assert parse_since(" 7D ") == dt.timedelta(days=7)
    assert parse_since("all") is None


def test_short_duration():
    assert [short_duration(s) for s in (5, 600, 3600, 3900, 90000, 172800)] == [
        "5 s",
        "10 min",
        "1 h",
        "1 h 5 min",
        "1 d 1 h",
        "2 d",
    ]


# --- the daily snapshot of settled rows ------------------------------------------------------


def seed_a_season() -> None:
    """Settled, failed and queued rows moved over 40 days before NOW, on many watches."""
    watches = WatchFactory.create_batch(3)
    mix = [
        (Status.SENT, Reason.DELIVERED),
        (Status.DROPPED, Reason.CONDITION_LOST),
        (Status.DROPPED, Reason.OUT_OF_STOCK),
        (Status.FAILED, Reason.DELIVER_SERVER),
        (Status.SENT, Reason.DELIVERED),
    ]
    for day in range(40):
        for i, watch in enumerate(watches):
            status, reason = mix[(day + i) % len(mix)]
            detected = NOW - dt.timedelta(days=day, hours=i)
            OutboxFactory(
                watch=watch,
                # Both channels, so the per-channel counts are checked too.
                channel=Channel.EMAIL if (day + i) % 3 == 0 else Channel.WEBPUSH,
                status=status,
                reason=reason,
                detected_at=detected,
                updated_at=detected + dt.timedelta(minutes=5 * i),
            )
    OutboxFactory(watch=watches[0], detected_at=NOW - dt.timedelta(days=50))  # old pending row


def test_a_snapshot_changes_no_figure(django_assert_max_num_queries):
    from outbox.models import CountSnapshot
    from outbox.reporting.summary import refresh_snapshot

    seed_a_season()
    live = outbox_stats(now=NOW)
    # migrate took one of the empty table; rows written since are all counted live
    assert CountSnapshot.objects.get().last_id == 0
    assert (
        outbox_stats(now=NOW + dt.timedelta(days=300)).status["sent"]["all"]
        == live.status["sent"]["all"]
    )
    counted = refresh_snapshot(NOW)
    assert counted > 50  # most settled rows are now in the snapshot
    with django_assert_max_num_queries(11):
        snapped = outbox_stats(now=NOW)
    assert snapped.status == live.status
    assert snapped.reasons == live.reasons
    assert snapped.channels == live.channels
    assert set(live.channels) >= {Channel.EMAIL.value, Channel.WEBPUSH.value}
    assert snapped.daily == live.daily
    # and the window counts still list exactly what they count
    assert snapped.status["sent"]["7d"] == live.status["sent"]["7d"] > 0


def test_a_snapshot_counts_every_window_and_day_as_counting_everything_would():
    from outbox.reporting.summary import refresh_snapshot

    seed_a_season()
    windows = {
        "1h": dt.timedelta(hours=1),
        "30h": dt.timedelta(hours=30),
        "7d": dt.timedelta(days=7),
        "12d5h": dt.timedelta(days=12, hours=5),
        "all": None,
    }
    live = outbox_stats(now=NOW, windows=windows, chart_days=45)
    refresh_snapshot(NOW - dt.timedelta(days=3))  # an older snapshot: more is live
    older = outbox_stats(now=NOW, windows=windows, chart_days=45)
    refresh_snapshot(NOW)
    snapped = outbox_stats(now=NOW, windows=windows, chart_days=45)
    for stats in (older, snapped):
        assert stats.status == live.status
        assert stats.reasons == live.reasons
        assert stats.channels == live.channels
        assert stats.daily == live.daily


def test_a_window_starting_at_a_service_days_start_counts_that_day_once():
    """Its first day is whole in the window: counted from the snapshot, not live as well."""
    from outbox.reporting.summary import refresh_snapshot

    midnight = dt.datetime(2026, 3, 9, 15, 0, tzinfo=dt.UTC)  # 2026-03-10 00:00 in Tokyo
    moved = midnight - dt.timedelta(days=7) + dt.timedelta(hours=12)  # the window's first day
    OutboxFactory(
        status=Status.SENT,
        reason=Reason.DELIVERED,
        detected_at=moved - dt.timedelta(hours=1),
        updated_at=moved,
    )
    live = outbox_stats(now=midnight, chart_days=0).status["sent"]
    assert live["7d"] == 1
    refresh_snapshot(midnight)
    assert outbox_stats(now=midnight, chart_days=0).status["sent"] == live


def test_a_row_written_after_the_snapshot_with_an_old_time_is_counted():
    """An import or a restore: the snapshot is set aside until the next one."""
    from outbox.reporting.summary import refresh_snapshot, usable_snapshot

    seed_a_season()
    refresh_snapshot(NOW)
    before = outbox_stats(now=NOW).status["sent"]["all"]
    assert usable_snapshot(NOW) is not None
    OutboxFactory(
        status=Status.SENT,
        reason=Reason.DELIVERED,
        detected_at=NOW - dt.timedelta(days=60),
        updated_at=NOW - dt.timedelta(days=60),
    )
    assert usable_snapshot(NOW) is None
    assert outbox_stats(now=NOW).status["sent"]["all"] == before + 1


def test_retention_deletes_then_snapshots_so_nothing_gone_is_counted():
    from outbox.retention import purge

    seed_a_season()
    before = outbox_stats(now=NOW).status
    result = purge(now=NOW, days=20)
    assert result.outbox > 0
    after = outbox_stats(now=NOW).status
    gone = sum(before[s]["all"] for s in before) - sum(after[s]["all"] for s in after)
    assert gone == result.outbox
    assert (
        after
        == outbox_stats(
            now=NOW,
            windows={
                "all": None,
                "1h": dt.timedelta(hours=1),
                "24h": dt.timedelta(hours=24),
                "7d": dt.timedelta(days=7),
            },
        ).status
    )


def test_overview_page_shows_the_marketplace_budget_and_watched_coverage(
    admin_client, ichiba, settings
):
    now = timezone.now()
    for minutes in (5, 30, 120):
        WatchFactory(listing=ListingFactory(last_polled_at=now - dt.timedelta(minutes=minutes)))
    response = admin_client.get(OVERVIEW_URL)
    assert response.status_code == 200
    marketplaces = response.context["marketplaces"]
    (row,) = marketplaces["budgets"]
    assert (row.source, row.app_id) == ("rakuten", app_id_label(APP_ID))
    assert row.available == row.configured == settings.RAKUTEN_RATE_PER_SECOND * 60
    assert row.used == 0  # the host's budget counts the slots its processes took
    assert marketplaces["coverage"]["watched"] == 3
    html = response.content.decode()
    assert "33 % in 15 min · 67 % in 1 h" in html
    assert app_id_label(APP_ID) in html and APP_ID not in html


def test_overview_counts_per_channel_with_links_to_exactly_those_rows(admin_client):
    with time_machine.travel(NOW, tick=False):
        for channel, status, reason in [
            (Channel.EMAIL, Status.SENT, Reason.DELIVERED),
            (Channel.EMAIL, Status.SENT, Reason.DELIVERED),
            (Channel.EMAIL, Status.DROPPED, Reason.RECIPIENT_REFUSED),
            (Channel.WEBPUSH, Status.SENT, Reason.DELIVERED),
            (Channel.WEBPUSH, Status.RETRY, Reason.QUIET_HOURS),
        ]:
            OutboxFactory(channel=channel, status=status, reason=reason, updated_at=ago(hours=2))
        overview = admin_client.get(OVERVIEW_URL).context["overview"]
        tables = {
            t.status: {r.key: tuple(c.count for c in r.cells) for r in t.rows}
            for t in overview.channel_tables
        }
        # windows: 1h, 24h, 7d, all
        assert tables == {
            "email": {"sent": (0, 2, 2, 2), "dropped": (0, 1, 1, 1)},
            "webpush": {"sent": (0, 1, 1, 1), "retry": (0, 1, 1, 1)},
        }
        for table in overview.channel_tables:
            for row in table.rows:
                for cell in row.cells:
                    listed = admin_client.get(cell.url).context["cl"].result_count
                    assert listed == cell.count, cell.url
        html = admin_client.get(OVERVIEW_URL, headers={"accept-language": "en"}).content.decode()
        assert "E-mail by status" in html
