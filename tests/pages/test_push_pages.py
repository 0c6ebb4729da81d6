"""The browser-facing pieces served by Django: /sw.js, the settings page, and the test
notification (a real push through the webpush channel to the fake push service)."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages

from outbox import vapid
from outbox.models import Outbox
from tests.factories import device_with_cookie
from tests.fakes.push_service import subscribe
from watches.models import Device

pytestmark = pytest.mark.django_db


def test_service_worker_is_served_at_the_root_for_the_whole_site(client):
    response = client.get("/sw.js")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript; charset=utf-8"
    assert response["Service-Worker-Allowed"] == "/"
    assert response["Cache-Control"] == "no-cache"
    body = response.content.decode()
    assert "pushsubscriptionchange" in body
    assert "notificationclick" in body
    assert "renotify: false" in body
    assert 'importScripts("/static/js/notification-target.js")' in body


def test_service_worker_carries_the_application_server_key(client):
    body = client.get("/sw.js").content.decode()
    match = re.search(r'APPLICATION_SERVER_KEY = "([^"]*)"', body)
    assert match[1].replace("\\u002D", "-") == vapid.public_key_b64()


def test_service_worker_creates_no_device(client):
    client.get("/sw.js")
    assert Device.objects.count() == 0


def test_settings_page_offers_push_without_asking_anything(client):
    html = client.get("/settings/").content.decode()
    assert 'id="push-settings"' in html
    assert f'data-vapid-key="{vapid.public_key_b64()}"' in html
    assert 'data-sw-url="/sw.js"' in html
    assert "data-push-toggle" in html
    assert "/static/js/push.js" in html
    assert html.count("csrfmiddlewaretoken") >= 2


def test_settings_page_shows_the_devices_push_state(client):
    device_with_cookie(
        client,
        push_endpoint="https://fcm.googleapis.com/x",
        push_p256dh="p",
        push_auth="a",
        push_active=True,
    )
    assert 'data-server-active="true"' in client.get("/settings/").content.decode()


def test_settings_page_without_a_key_says_push_is_not_set_up(client, settings, tmp_path):
    settings.VAPID_PRIVATE_KEY = ""
    settings.VAPID_PRIVATE_KEY_FILE = tmp_path / "none.pem"
    html = client.get("/settings/").content.decode()
    assert 'data-vapid-key=""' in html


def test_push_script_asks_for_permission_only_from_the_click_handler():
    """A static check beside the browser test: requestPermission appears once, inside the
    function the click handler calls."""
    from django.contrib.staticfiles import finders

    with open(finders.find("js/push.js"), encoding="utf-8") as handle:
        source = handle.read()
    assert source.count("Notification.requestPermission") == 1
    turn_on = source[source.index("async function turnOn") : source.index("async function turnOff")]
    assert "Notification.requestPermission" in turn_on


# --- The test notification ------------------------------------------------------------------


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_test_notification_goes_through_the_webpush_channel(client, push_service):
    subscriber = push_service.new_subscriber()
    subscribe(client, subscriber)

    response = client.post("/push/test")

    assert response.status_code == 302
    assert any("Test notification sent" in m for m in messages_of(response))
    [received] = push_service.received
    assert received.vapid_error is None
    payload = received.payload
    assert payload["title"] == "Yasugoro test notification"
    assert payload["url"] == "/settings/"
    assert payload["listing"] is None
    assert received.topic == "test"
    assert Outbox.objects.count() == 0  # not through the outbox


def test_test_notification_without_a_subscription_says_so(client):
    device_with_cookie(client)
    response = client.post("/push/test")
    assert response.status_code == 302
    assert any("no push subscription" in m for m in messages_of(response))


def test_test_notification_without_any_device_says_so(client):
    response = client.post("/push/test")
    assert any("no push subscription" in m for m in messages_of(response))
    assert Device.objects.count() == 0


def test_test_notification_to_a_gone_subscription_switches_it_off(client, push_service):
    subscriber = push_service.new_subscriber()
    subscribe(client, subscriber)
    push_service.answer(410, "unsubscribed")

    response = client.post("/push/test")

    assert any("no longer exists" in m for m in messages_of(response))
    assert Device.objects.get().push_active is False


def test_test_notification_failure_is_explained(client, push_service):
    subscriber = push_service.new_subscriber()
    subscribe(client, subscriber)
    push_service.answer(500, "oops")

    response = client.post("/push/test")

    assert any("could not be sent (server)" in m for m in messages_of(response))
    assert Device.objects.get().push_active is True


def test_test_notification_is_rate_limited_per_device(client, push_service):
    subscriber = push_service.new_subscriber()
    subscribe(client, subscriber)
    client.post("/push/test")
    response = client.post("/push/test")
    assert any("wait a few seconds" in m for m in messages_of(response))
    assert len(push_service.received) == 1
