"""Anonymous devices: hashed cookie tokens, isolation between devices (404, never 403), the
one-time transfer link, and delete-my-data."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from outbox.enqueue import enqueue
from outbox.models import Outbox, OutboxEvent
from tests.factories import WatchFactory, device_with_cookie
from tests.fakes.push_service import Subscriber
from watches.devices import cookie_name, hash_token
from watches.models import Device, Watch

pytestmark = pytest.mark.django_db

FCM = "https://fcm.googleapis.com/fcm/send/"


def subscription(endpoint: str = FCM + "abc") -> dict:
    return Subscriber(id="x", endpoint=endpoint).subscription_json()


def subscribe(client, endpoint: str = FCM + "abc"):
    return client.post("/push/subscribe", subscription(endpoint), content_type="application/json")


# --- Creation and the cookie ----------------------------------------------------------------


def test_first_subscribe_creates_a_device_and_sets_a_hardened_cookie(client):
    response = subscribe(client)

    assert response.status_code == 200
    cookie = response.cookies[cookie_name()]
    token = cookie.value
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 256 bits from secrets
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert cookie["max-age"] == 365 * 24 * 3600
    assert cookie["path"] == "/"
    device = Device.objects.get()
    assert device.token_hash == hash_token(token)
    assert device.push_active


def test_only_the_hash_of_a_token_is_stored(client):
    token = subscribe(client).cookies[cookie_name()].value
    client.post("/settings/transfer")
    row = Device.objects.values().get()
    assert all(token not in str(value) for value in row.values())
    assert row["token_hash"] == hash_token(token)


def test_outside_debug_the_cookie_is_secure_and_host_prefixed(client, settings):
    settings.DEVICE_COOKIE_SECURE = True
    response = subscribe(client)
    cookie = response.cookies["__Host-yasugoro_device"]
    assert cookie["secure"] is True
    assert cookie["httponly"] is True


def test_the_second_request_reuses_the_device(client):
    subscribe(client)
    response = subscribe(client, FCM + "def")
    assert cookie_name() not in response.cookies
    assert Device.objects.count() == 1
    assert Device.objects.get().push_endpoint == FCM + "def"


def test_viewing_settings_creates_nothing(client):
    response = client.get("/settings/")
    assert response.status_code == 200
    assert Device.objects.count() == 0
    assert cookie_name() not in response.cookies


@pytest.mark.parametrize("token", ["", "short", "x" * 43, "!" * 43, "a" * 44])
def test_an_unknown_or_malformed_token_is_no_device(client, token):
    device_with_cookie()
    client.cookies[cookie_name()] = token
    assert client.get("/push/subscription").status_code == 404


def test_device_pages_are_private_to_their_browser(client):
    device_with_cookie(client)
    response = client.get("/settings/")
    assert "private" in response["Cache-Control"]
    assert "no-store" in response["Cache-Control"]
    assert "Cookie" in response["Vary"]


def test_last_seen_moves_at_most_hourly(client, django_assert_num_queries):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        device, _ = device_with_cookie(client, last_seen_at=start)
    soon = start + dt.timedelta(minutes=30)
    # The lookup only: no write.
    with time_machine.travel(soon, tick=False), django_assert_num_queries(1):
        assert client.get("/push/subscription").status_code == 200
    device.refresh_from_db()
    assert device.last_seen_at == start
    later = start + dt.timedelta(hours=2)
    with time_machine.travel(later, tick=False):
        client.get("/push/subscription")
    device.refresh_from_db()
    assert device.last_seen_at == later


# --- Isolation ------------------------------------------------------------------------------


@pytest.fixture
def two_devices():
    """Device A with a watch, a notification and a subscription; device B with its own."""
    alice, bob = Client(), Client()
    a, _ = device_with_cookie(
        alice, push_endpoint=FCM + "alice", push_p256dh="p", push_auth="a", push_active=True
    )
    b, _ = device_with_cookie(
        bob, push_endpoint=FCM + "bob", push_p256dh="p", push_auth="a", push_active=True
    )
    watch = WatchFactory(device=a)
    enqueue(watch, timezone.now(), {"line": "1200"})
    row = Outbox.objects.get(watch=watch)
    OutboxEvent.objects.create(outbox=row, from_status="pending", to_status="sending")
    return alice, bob, a, b, watch, row


def test_a_device_sees_its_own_watch_history_and_subscription(two_devices):
    alice, _, _, _, watch, row = two_devices
    assert alice.get(f"/me/watches/{watch.pk}.json").json()["id"] == watch.pk
    assert alice.get(f"/me/history/{row.pk}.json").json()["id"] == row.pk
    assert [r["id"] for r in alice.get("/me/history.json").json()["rows"]] == [row.pk]
    assert alice.get("/push/subscription").json()["active"] is True


def test_another_devices_watch_and_history_are_404(two_devices):
    _, bob, _, _, watch, row = two_devices
    assert bob.get(f"/me/watches/{watch.pk}.json").status_code == 404
    assert bob.get(f"/me/history/{row.pk}.json").status_code == 404
    assert bob.get("/me/history.json").json()["rows"] == []
    # …exactly as for ids that do not exist at all
    assert bob.get(f"/me/watches/{watch.pk + 1000}.json").status_code == 404


def test_no_cookie_owns_nothing(two_devices):
    _, _, _, _, watch, row = two_devices
    anonymous = Client()
    assert anonymous.get(f"/me/watches/{watch.pk}.json").status_code == 404
    assert anonymous.get(f"/me/history/{row.pk}.json").status_code == 404
    assert anonymous.get("/me/history.json").status_code == 404
    assert anonymous.get("/push/subscription").status_code == 404
    assert anonymous.post("/push/unsubscribe").status_code == 404


def test_another_devices_subscription_cannot_be_changed(two_devices):
    _, bob, a, b, _, _ = two_devices
    response = bob.post(
        "/push/unsubscribe", {"endpoint": a.push_endpoint}, content_type="application/json"
    )
    assert response.status_code == 404
    response = bob.post(
        "/push/resubscribe",
        {"old_endpoint": a.push_endpoint, "subscription": subscription(FCM + "stolen")},
        content_type="application/json",
        headers={"X-Yasugoro-Push": "resubscribe", "Origin": "http://testserver"},
    )
    assert response.status_code == 404
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.push_endpoint, a.push_active) == (FCM + "alice", True)
    assert b.push_endpoint == FCM + "bob"


def test_subscription_state_never_shows_the_endpoint_or_keys(two_devices):
    alice, _, a, _, _, _ = two_devices
    body = alice.get("/push/subscription").content.decode()
    assert a.push_endpoint not in body
    assert "p256dh" not in body


# --- Transfer to another browser ------------------------------------------------------------


def make_transfer_link(client) -> str:
    response = client.post("/settings/transfer")
    assert response.status_code == 200
    assert response["Referrer-Policy"] == "same-origin"
    match = re.search(
        r'value="(http://testserver/transfer/[A-Za-z0-9_-]{43}/)"', response.content.decode()
    )
    assert match, "the settings page shows the link"
    return match[1].removeprefix("http://testserver")


def test_transfer_link_moves_the_device_once(client):
    old_browser = client
    device, old_token = device_with_cookie(
        old_browser, push_endpoint=FCM + "old", push_p256dh="p", push_auth="a", push_active=True
    )
    watch = WatchFactory(device=device)
    link = make_transfer_link(old_browser)
    assert link.split("/")[2] not in str(Device.objects.values().get())  # hash only

    new_browser = Client()
    # Opening the link (or a chat app previewing it) asks first and uses nothing up.
    opened = new_browser.get(link)
    assert opened.status_code == 200
    # The token in the URL never goes to another site in a Referer; our forms keep an Origin.
    assert opened["Referrer-Policy"] == "same-origin"
    assert Client().get(link).status_code == 200

    response = new_browser.post(link)
    assert response.status_code == 302
    new_token = response.cookies[cookie_name()].value
    assert new_token != old_token
    assert new_browser.get(f"/me/watches/{watch.pk}.json").status_code == 200
    # The old browser let go; the subscription it held is cleared, not moved.
    assert old_browser.get(f"/me/watches/{watch.pk}.json").status_code == 404
    device.refresh_from_db()
    assert device.token_hash == hash_token(new_token)
    assert (device.push_endpoint, device.push_active) == ("", False)
    assert device.transfer_token_hash is None

    # Single use: the link is burnt, for every browser.
    third = Client()
    assert third.get(link).status_code == 404
    assert third.post(link).status_code == 404
    assert cookie_name() not in third.post(link).cookies


def test_transfer_link_expires_after_fifteen_minutes(client):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        device_with_cookie(client)
        link = make_transfer_link(client)
    with time_machine.travel(start + dt.timedelta(minutes=14), tick=False):
        assert Client().get(link).status_code == 200
    with time_machine.travel(start + dt.timedelta(minutes=16), tick=False):
        other = Client()
        assert other.get(link).status_code == 404
        assert other.post(link).status_code == 404


def test_a_new_transfer_link_replaces_the_previous_one(client):
    device_with_cookie(client)
    first = make_transfer_link(client)
    second = make_transfer_link(client)
    assert Client().post(first).status_code == 404
    assert Client().post(second).status_code == 302


def test_a_browser_with_its_own_watches_is_told_they_stay_behind(client):
    device_with_cookie(client)
    link = make_transfer_link(client)
    other = Client()
    own, _ = device_with_cookie(other)
    WatchFactory(device=own)
    WatchFactory(device=own)
    assert "own 2 watches will be left behind" in other.get(link).content.decode()


def test_opening_the_link_in_the_same_browser_offers_nothing_to_press(client):
    device_with_cookie(client)
    link = make_transfer_link(client)
    html = client.get(link).content.decode()
    assert "belongs to this very browser" in html
    assert "Move them here" not in html


def test_a_garbage_transfer_token_is_404(client):
    assert client.get("/transfer/nope/").status_code == 404
    assert client.post("/transfer/" + "A" * 43 + "/").status_code == 404


def test_opening_the_link_maker_by_get_makes_nothing(client):
    device, _ = device_with_cookie(client)
    response = client.get("/settings/transfer")
    assert response.status_code == 302 and response["Location"] == "/settings/#move-h"
    device.refresh_from_db()
    assert device.transfer_token_hash is None


def test_transfer_link_needs_a_device(client):
    response = client.post("/settings/transfer")
    assert response.status_code == 302
    assert Device.objects.count() == 0


# --- Delete my data -------------------------------------------------------------------------


def test_delete_my_data_removes_the_device_and_everything_it_owns(two_devices):
    alice, _, a, b, _, row = two_devices
    response = alice.post("/settings/delete", {"confirm": "yes"})

    assert response.status_code == 302
    cookie = response.cookies[cookie_name()]
    assert cookie.value == ""
    assert cookie["max-age"] == 0
    assert not Device.objects.filter(pk=a.pk).exists()
    assert not Watch.objects.filter(device_id=a.pk).exists()
    assert not Outbox.objects.filter(device_id=a.pk).exists()
    assert not OutboxEvent.objects.filter(outbox_id=row.pk).exists()
    # Bob is untouched.
    assert Device.objects.filter(pk=b.pk).exists()


def test_delete_needs_the_confirmation_box(two_devices):
    alice, _, a, _, _, _ = two_devices
    alice.post("/settings/delete", {})
    assert Device.objects.filter(pk=a.pk).exists()


def test_delete_without_a_device_is_harmless(client):
    assert client.post("/settings/delete", {"confirm": "yes"}).status_code == 302
