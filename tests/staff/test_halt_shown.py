"""A halted marketplace is shown where people look: /readyz says it with the reason in words
(degraded, still ready), /metrics counts it, the admin overview and the changelist's panel
open with a banner naming the setting or the registration to fix and the rows held, and
/notifications/ says in words why a held notification waits — in Japanese and English."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from outbox.reporting import explain
from tests.factories import (
    DeviceFactory,
    DispatchRunFactory,
    ListingFactory,
    WatchFactory,
    device_with_cookie,
)
from tests.outbox_helpers import enqueue_for
from watches.models import Channel, MarketplaceHalt
from watches.polling.observations import fetch

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 12, 6, 10, 0, tzinfo=TOKYO)
CODE = "yasu-shop:tp-12r"
OVERVIEW_URL = "/admin/outbox/outbox/overview/"
CHANGELIST_URL = "/admin/outbox/outbox/"


@pytest.fixture
def clock(time_machine, settings):
    settings.MARKETPLACE_PROBE_SECONDS = 300
    time_machine.move_to(T0, tick=False)
    return time_machine


@pytest.fixture
def halted(clock, ichiba, settings):
    """Rakuten halted at T0: its API version was retired."""
    ichiba.add(CODE, price=900)
    settings.RAKUTEN_API_VERSION = "20220601"
    fetch("rakuten", [CODE])
    return MarketplaceHalt.objects.get()


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("ops", "ops@example.test", "pw")
    client.force_login(user)
    return client


def held_row(device=None):
    listing = ListingFactory(source="rakuten", item_code=CODE, price=900, units_per_pack=None)
    watch = WatchFactory(listing=listing, device=device or DeviceFactory(), target_price=1000)
    return enqueue_for(watch, price=900, line="1000")


# --- /readyz ------------------------------------------------------------------------------


def test_readyz_says_which_marketplace_is_halted_and_why_yet_stays_ready(client, halted):
    DispatchRunFactory(started_at=T0, finished_at=T0)
    response = client.get("/readyz")
    assert response.status_code == 200  # the pages serve: no web host is pulled
    body = response.json()
    assert body["status"] == "degraded"
    check = body["checks"]["marketplaces"]
    assert check["ok"] is False
    (halt,) = check["halted"]
    assert halt["source"] == "rakuten"
    assert halt["settings"] == ["RAKUTEN_API_VERSION"]
    assert "Rakuten has no Item Search version 20220601" in halt["reason"]
    assert dt.datetime.fromisoformat(halt["since"]) == T0
    assert dt.datetime.fromisoformat(halt["next_probe_at"]) == T0 + dt.timedelta(seconds=300)


def test_readyz_names_the_registration_when_no_setting_fixes_it(client, clock, ichiba):
    ichiba.allowed_ips = {"203.0.113.7"}
    fetch("rakuten", [CODE])
    DispatchRunFactory(started_at=T0, finished_at=T0)
    (halt,) = client.get("/readyz").json()["checks"]["marketplaces"]["halted"]
    assert halt["settings"] == []
    assert "Rakuten Developers" in halt["reason"]


def test_readyz_is_ok_again_once_the_halt_lifts(client, halted, ichiba, clock):
    DispatchRunFactory(started_at=T0, finished_at=T0)
    ichiba.versions.add("20220601")
    clock.move_to(T0 + dt.timedelta(seconds=300), tick=False)
    DispatchRunFactory(started_at=T0 + dt.timedelta(seconds=300))
    fetch("rakuten", [CODE])
    body = client.get("/readyz").json()
    assert body["status"] == "ok"
    assert body["checks"]["marketplaces"] == {"ok": True, "halted": []}


# --- /metrics -----------------------------------------------------------------------------


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_metrics_count_the_halted_marketplaces_beside_the_config_requests(client, halted, yahoo):
    client.get("/healthz")  # a request flushes what this process counted
    samples = scrape(client)
    assert samples[("yasugoro_marketplace_halted", (("source", "rakuten"),))] == 1
    assert samples[("yasugoro_marketplace_halted", (("source", "yahoo"),))] == 0
    assert samples[("yasugoro_marketplace_halted", (("source", "demo"),))] == 0
    since = ("yasugoro_marketplace_halted_since_timestamp_seconds", (("source", "rakuten"),))
    assert samples[since] == T0.timestamp()
    config = [
        value
        for (name, labels), value in samples.items()
        if name == "yasugoro_marketplace_requests_total" and ("kind", "config") in labels
    ]
    assert config == [1]  # the one request that found the fault


# --- the admin ----------------------------------------------------------------------------


def test_the_overview_opens_with_a_banner_naming_the_setting_and_the_rows_held(staff, halted):
    held_row()
    run_cycle()
    page = staff.get(OVERVIEW_URL).content.decode()
    banner = page[page.index('class="ob-halts"') : page.index('class="ob-health"')]
    assert (
        "Rakuten Ichiba is halted: it will not answer until a person fixes its configuration."
        in (banner)
    )
    assert "<code>RAKUTEN_API_VERSION</code>" in banner
    assert "Rakuten has no Item Search version 20220601" in banner
    assert "1 notification is held until the marketplace answers again." in banner
    assert "?reason__exact=marketplace_halted&amp;status__exact=retry" in banner or (
        "status__exact=retry&amp;reason__exact=marketplace_halted" in banner
    )
    listed = staff.get(f"{CHANGELIST_URL}?status__exact=retry&reason__exact=marketplace_halted")
    assert listed.content.decode().count('class="action-select"') == 1


def test_the_changelist_panel_shows_the_banner_too_in_japanese(staff, halted):
    page = staff.get(CHANGELIST_URL, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "楽天市場への問い合わせを停止しています" in page
    assert "<code>RAKUTEN_API_VERSION</code>" in page


def test_a_registration_fault_names_the_registration(staff, clock, ichiba):
    ichiba.allowed_ips = {"203.0.113.7"}
    fetch("rakuten", [CODE])
    page = staff.get(OVERVIEW_URL).content.decode()
    assert "Fix: the application’s registration on the marketplace’s developer site." in page
    assert "allowed IP addresses on Rakuten Developers" in page


def test_no_banner_without_a_halt(staff, clock):
    assert 'class="ob-halts"' not in staff.get(OVERVIEW_URL).content.decode()


def test_the_held_rows_reason_reads_in_both_languages_for_staff(staff, halted):
    row = held_row()
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    url = f"{CHANGELIST_URL}{row.pk}/change/"
    assert "Held: marketplace needs a configuration fix" in staff.get(url).content.decode()
    ja = staff.get(url, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "保留中：マーケットプレイスの設定修正待ち" in ja
    assert "RAKUTEN_API_VERSION" in ja  # the row's detail: what to fix


# --- /notifications/ ----------------------------------------------------------------------


def test_a_held_notification_says_why_it_waits_in_both_languages(client, halted):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    row = held_row(device)
    run_cycle()
    assert Outbox.objects.get(pk=row.pk).reason == Reason.MARKETPLACE_HALTED
    page = client.get("/notifications/").content.decode()
    words = str(explain.RETRYING_BECAUSE[Reason.MARKETPLACE_HALTED])
    assert words.replace("'", "&#x27;") in page
    assert "RAKUTEN" not in page  # staff's words never reach the person
    ja = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "ショップのサイトが価格の確認に応じていません" in ja
