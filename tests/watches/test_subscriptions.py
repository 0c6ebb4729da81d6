"""Subscribing: strict validation (400 with a message, nothing stored), the endpoint
allowlist, one device per endpoint, CSRF, and the service worker's re-subscribe."""

from __future__ import annotations

import base64
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from tests.factories import device_with_cookie
from tests.fakes.push_service import Subscriber
from watches.devices import cookie_name
from watches.models import Device
from watches.subscriptions import InvalidSubscription, check_endpoint

pytestmark = pytest.mark.django_db

FCM = "https://fcm.googleapis.com/fcm/send/"


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def good(endpoint: str = FCM + "abc") -> dict:
    return Subscriber(id="x", endpoint=endpoint).subscription_json()


def with_keys(**keys) -> dict:
    data = good()
    data["keys"] = {**data["keys"], **keys}
    return data


BAD_SUBSCRIPTIONS = {
    "not an object": [good()],
    "no endpoint": {"keys": good()["keys"]},
    "endpoint not a string": {**good(), "endpoint": 42},
    "no keys": {"endpoint": FCM + "abc"},
    "keys not an object": {**good(), "keys": "p256dh"},
    "no p256dh": with_keys(p256dh=None),
    "no auth": with_keys(auth=None),
    "http endpoint": good("http://fcm.googleapis.com/fcm/send/abc"),
    "private address": good("https://10.0.0.1/"),
    "localhost": good("https://localhost/"),
    "loopback": good("https://127.0.0.1/push"),
    "unknown host": good("https://push.evil.example/abc"),
    "allowed host as a prefix": good("https://fcm.googleapis.com.evil.example/abc"),
    "allowed host on another port": good("https://fcm.googleapis.com:8443/abc"),
    "userinfo": good("https://user@fcm.googleapis.com/abc"),
    "userinfo to another host": good("https://fcm.googleapis.com@evil.example/abc"),
    "backslash": good("https://evil.example\\@fcm.googleapis.com/abc"),
    "bare domain of a wildcard": good("https://notify.windows.com/w/?token=abc"),
    "not a URL": good("fcm.googleapis.com/abc"),
    "javascript": good("javascript:alert(1)"),
    "too long": good(FCM + "a" * 1000),
    "p256dh too short": with_keys(p256dh=b64(b"\x04" + b"\x01" * 63)),
    "p256dh too long": with_keys(p256dh=b64(b"\x04" + b"\x01" * 65)),
    "p256dh compressed": with_keys(p256dh=b64(b"\x02" + b"\x01" * 64)),
    "p256dh off the curve": with_keys(p256dh=b64(b"\x04" + b"\x01" * 64)),
    "p256dh standard base64": with_keys(p256dh=good()["keys"]["p256dh"] + "+/"),
    "auth 15 bytes": with_keys(auth=b64(b"\x01" * 15)),
    "auth 17 bytes": with_keys(auth=b64(b"\x01" * 17)),
    "auth not base64": with_keys(auth="not base64 at all!"),
}


@pytest.mark.parametrize("data", BAD_SUBSCRIPTIONS.values(), ids=BAD_SUBSCRIPTIONS.keys())
def test_a_bad_subscription_is_400_with_a_message_and_nothing_stored(client, data):
    response = client.post("/push/subscribe", data, content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert body["ok"] is False
    assert len(body["error"]) > 10
    assert Device.objects.count() == 0
    assert cookie_name() not in response.cookies


def test_a_bad_subscription_changes_nothing_on_an_existing_device(client):
    device, _ = device_with_cookie(
        client, push_endpoint=FCM + "kept", push_p256dh="p", push_auth="a", push_active=True
    )
    response = client.post(
        "/push/subscribe", good("https://10.0.0.1/"), content_type="application/json"
    )
    assert response.status_code == 400
    device.refresh_from_db()
    assert (device.push_endpoint, device.push_active) == (FCM + "kept", True)


def test_the_message_names_the_refused_host_and_port(client):
    response = client.post(
        "/push/subscribe",
        good("https://fcm.googleapis.com:8443/x"),
        content_type="application/json",
    )
    assert response.json()["error"] == "fcm.googleapis.com:8443 is not a known push service."


def test_a_one_megabyte_body_is_refused_unread(client):
    data = good()
    data["padding"] = "x" * 1_000_000
    response = client.post("/push/subscribe", data, content_type="application/json")
    assert response.status_code == 400
    assert "larger than 4096 bytes" in response.json()["error"]
    assert Device.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (json.dumps(good()), "text/plain"),
        ("endpoint=https://fcm.googleapis.com/x", "application/x-www-form-urlencoded"),
        ("{not json", "application/json"),
        (b"\xff\xfe", "application/json"),
        ("", "application/json"),
    ],
)
def test_only_json_is_accepted(client, body, content_type):
    response = client.post("/push/subscribe", body, content_type=content_type)
    assert response.status_code == 400
    assert response.json()["error"]
    assert Device.objects.count() == 0


def test_subscribe_answers_only_post(client):
    assert client.get("/push/subscribe").status_code == 405


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://fcm.googleapis.com/fcm/send/dGVzdA:APA91b",
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABl",
        "https://web.push.apple.com/QGxVtx-4PMmW",
        "https://wns2-by3p.notify.windows.com/w/?token=BQYAAAB",
        "https://FCM.googleapis.com:443/fcm/send/x",
    ],
)
def test_the_default_push_services_are_allowed(endpoint):
    check_endpoint(endpoint)


def test_an_allowlisted_origin_is_matched_exactly(settings):
    settings.PUSH_SERVICE_HOSTS = ["http://127.0.0.1:8765"]
    check_endpoint("http://127.0.0.1:8765/wpush/abc")
    for other in (
        "http://127.0.0.1:8766/wpush/abc",
        "https://127.0.0.1:8765/wpush/abc",
        "http://127.0.0.2:8765/wpush/abc",
    ):
        with pytest.raises(InvalidSubscription):
            check_endpoint(other)


@pytest.mark.parametrize("entry", ["http://127.0.0.1:8765/path", "not a host!", "ftp//x"])
def test_a_malformed_allowlist_entry_is_a_configuration_error(settings, entry):
    settings.PUSH_SERVICE_HOSTS = [entry]
    with pytest.raises(ImproperlyConfigured):
        check_endpoint(FCM + "abc")


# --- Storing -------------------------------------------------------------------------------


def test_the_same_endpoint_sent_again_is_one_subscription(client):
    data = good()
    for _ in range(3):
        assert client.post("/push/subscribe", data, content_type="application/json").json()[
            "active"
        ]
    device = Device.objects.get()
    assert device.push_endpoint == data["endpoint"]
    assert device.push_p256dh == data["keys"]["p256dh"]
    assert device.push_auth == data["keys"]["auth"]


def test_an_endpoint_held_by_another_device_moves(client):
    """The same browser under a new cookie (cookies cleared, a transfer…) sends the
    subscription it already had: it belongs to the new device now, not to both."""
    data = good()
    earlier = Client()
    earlier.post("/push/subscribe", data, content_type="application/json")
    client.post("/push/subscribe", data, content_type="application/json")

    old, new = Device.objects.order_by("id")
    assert (old.push_endpoint, old.push_active) == ("", False)
    assert (new.push_endpoint, new.push_active) == (data["endpoint"], True)


def test_unsubscribe_forgets_the_subscription(client):
    client.post("/push/subscribe", good(), content_type="application/json")
    response = client.post("/push/unsubscribe", {}, content_type="application/json")
    assert response.json() == {"ok": True, "active": False}
    device = Device.objects.get()
    assert (device.push_endpoint, device.push_p256dh, device.push_auth) == ("", "", "")
    assert not device.push_active


def test_unsubscribe_with_the_own_endpoint(client):
    client.post("/push/subscribe", good(), content_type="application/json")
    response = client.post(
        "/push/unsubscribe", {"endpoint": FCM + "abc"}, content_type="application/json"
    )
    assert response.status_code == 200
    assert not Device.objects.get().push_active


# --- CSRF ----------------------------------------------------------------------------------


def csrf_client() -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.get("/settings/")
    return client, client.cookies["csrftoken"].value


def test_subscribe_needs_the_csrf_token():
    client, token = csrf_client()
    refused = client.post("/push/subscribe", good(), content_type="application/json")
    assert refused.status_code == 403
    assert Device.objects.count() == 0
    accepted = client.post(
        "/push/subscribe", good(), content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert accepted.status_code == 200


@pytest.mark.parametrize(
    "path", ["/push/unsubscribe", "/push/test", "/settings/transfer", "/settings/delete"]
)
def test_every_state_changing_form_needs_the_csrf_token(path):
    client, _ = csrf_client()
    device_with_cookie(
        client, push_endpoint=FCM + "x", push_p256dh="p", push_auth="a", push_active=True
    )
    assert client.post(path, {"confirm": "yes"}).status_code == 403
    assert Device.objects.get().push_active


def test_transfer_redeem_needs_the_csrf_token():
    owner = Client()
    device_with_cookie(owner)
    page = owner.post("/settings/transfer").content.decode()
    link = page.split('value="http://testserver', 1)[1].split('"', 1)[0]
    client, _ = csrf_client()
    assert client.post(link).status_code == 403


# --- The service worker's re-subscribe ------------------------------------------------------

WORKER = {"X-Yasugoro-Push": "resubscribe", "Origin": "http://testserver"}


def resubscribe(client, body, headers=WORKER):
    return client.post("/push/resubscribe", body, content_type="application/json", headers=headers)


@pytest.fixture
def subscribed():
    """A browser (CSRF enforced, as in real life) whose device has a subscription."""
    client = Client(enforce_csrf_checks=True)
    device, _ = device_with_cookie(
        client, push_endpoint=FCM + "old", push_p256dh="p", push_auth="a", push_active=True
    )
    return client, device


def test_the_worker_replaces_a_rotated_subscription_without_a_csrf_token(subscribed):
    client, device = subscribed
    response = resubscribe(client, {"old_endpoint": FCM + "old", "subscription": good(FCM + "new")})
    assert response.status_code == 200
    device.refresh_from_db()
    assert (device.push_endpoint, device.push_active) == (FCM + "new", True)


def test_the_worker_may_not_know_the_old_endpoint(subscribed):
    client, device = subscribed
    response = resubscribe(client, {"old_endpoint": None, "subscription": good(FCM + "new")})
    assert response.status_code == 200
    device.refresh_from_db()
    assert device.push_endpoint == FCM + "new"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://testserver"},  # no worker header: a plain cross-site form cannot set it
        {"X-Yasugoro-Push": "resubscribe"},  # no Origin
        {"X-Yasugoro-Push": "resubscribe", "Origin": "https://evil.example"},
        {"X-Yasugoro-Push": "resubscribe", "Origin": "null"},
        {**WORKER, "Sec-Fetch-Site": "cross-site"},
        {"X-Yasugoro-Push": "yes", "Origin": "http://testserver"},
    ],
)
def test_resubscribe_refuses_anything_but_our_own_worker(subscribed, headers):
    client, device = subscribed
    response = resubscribe(
        client, {"old_endpoint": FCM + "old", "subscription": good(FCM + "new")}, headers
    )
    assert response.status_code == 403
    device.refresh_from_db()
    assert device.push_endpoint == FCM + "old"


def test_resubscribe_validates_like_subscribe(subscribed):
    client, device = subscribed
    response = resubscribe(client, {"subscription": good("https://10.0.0.1/")})
    assert response.status_code == 400
    assert resubscribe(client, [1, 2]).status_code == 400
    device.refresh_from_db()
    assert device.push_endpoint == FCM + "old"


def test_resubscribe_without_a_device_is_404():
    response = resubscribe(Client(), {"subscription": good(FCM + "new")})
    assert response.status_code == 404
    assert Device.objects.count() == 0
