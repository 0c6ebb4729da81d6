"""Bad input to the push JSON endpoints: a clear 4xx with a message, and nothing written
(row counts and the device's subscription compared before and after)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import device_with_cookie
from tests.fakes.push_service import Subscriber
from watches.models import Device
from watches.pages.device import SUBSCRIBE_PER_MINUTE

pytestmark = pytest.mark.django_db

FCM = "https://fcm.googleapis.com/fcm/send/"
NESTED = "[" * 1000 + "]" * 1000  # 2 KB: under the 4 KB limit, deeper than the parser's stack
WORKER = {"X-Yasugoro-Push": "resubscribe", "Origin": "http://testserver"}


def subscription(n: int = 0) -> dict:
    return Subscriber(id=f"s{n}", endpoint=f"{FCM}{n}").subscription_json()


def state() -> list[tuple]:
    """Every device row as the endpoints could change it."""
    return list(
        Device.objects.order_by("pk").values_list(
            "pk", "token_hash", "push_endpoint", "push_p256dh", "push_auth", "push_active"
        )
    )


@pytest.fixture
def subscribed():
    client = Client(enforce_csrf_checks=False)
    device_with_cookie(
        client, push_endpoint=FCM + "kept", push_p256dh="p", push_auth="a", push_active=True
    )
    return client


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/push/subscribe", {}), ("/push/unsubscribe", {}), ("/push/resubscribe", WORKER)],
)
@pytest.mark.parametrize("body", [NESTED, "[" * 2000])
def test_deeply_nested_json_is_400_and_changes_nothing(subscribed, path, headers, body):
    before = state()
    response = subscribed.post(path, body, content_type="application/json", headers=headers)
    assert response.status_code == 400
    assert response.json() == {"ok": False, "error": "The request body is nested too deeply."}
    assert state() == before


@pytest.mark.parametrize("body", ["[1]", "1", '"x"', "null", "true", '{"endpoint": 42}'])
def test_unsubscribe_refuses_anything_but_an_object_and_keeps_the_subscription(subscribed, body):
    before = state()
    response = subscribed.post("/push/unsubscribe", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["ok"] is False and len(response.json()["error"]) > 10
    assert state() == before
    assert Device.objects.get().push_active is True


@pytest.mark.parametrize("body", ["{}", ""])
def test_unsubscribe_with_an_empty_object_or_body_still_forgets(subscribed, body):
    response = subscribed.post("/push/unsubscribe", body, content_type="application/json")
    assert response.status_code == 200
    assert Device.objects.get().push_active is False


@pytest.mark.parametrize("path", ["/push/subscribe", "/push/resubscribe"])
@pytest.mark.parametrize("body", ["[1]", "1", "null"])
def test_subscribe_and_resubscribe_refuse_non_objects(subscribed, path, body):
    before = state()
    response = subscribed.post(path, body, content_type="application/json", headers=WORKER)
    assert response.status_code == 400
    assert response.json()["error"]
    assert state() == before


def test_thirty_rapid_cookieless_subscribes_make_at_most_the_limit_of_devices():
    answers = []
    for n in range(30):
        # A new client each time: no cookie, so every accepted request makes a new device.
        response = Client().post(
            "/push/subscribe", subscription(n), content_type="application/json"
        )
        answers.append(response.status_code)
        if response.status_code == 429:
            assert response.json()["ok"] is False
            assert "Wait a minute" in response.json()["error"]
            assert response["Retry-After"] == "60"
            assert "yasugoro_device" not in response.cookies
    assert answers == [200] * SUBSCRIBE_PER_MINUTE + [429] * (30 - SUBSCRIBE_PER_MINUTE)
    assert Device.objects.count() == SUBSCRIBE_PER_MINUTE


def test_the_limit_is_refused_before_the_body_is_read():
    for n in range(SUBSCRIBE_PER_MINUTE):
        Client().post("/push/subscribe", subscription(n), content_type="application/json")
    before = state()
    response = Client().post("/push/subscribe", NESTED, content_type="application/json")
    assert response.status_code == 429
    assert state() == before


def test_the_limit_is_per_client_address():
    for n in range(SUBSCRIBE_PER_MINUTE):
        Client().post("/push/subscribe", subscription(n), content_type="application/json")
    other = Client(REMOTE_ADDR="192.0.2.7")
    response = other.post("/push/subscribe", subscription(99), content_type="application/json")
    assert response.status_code == 200
    assert Device.objects.count() == SUBSCRIBE_PER_MINUTE + 1


def test_the_limit_opens_again_after_a_minute():
    import time_machine
    from django.utils import timezone

    start = timezone.now()
    with time_machine.travel(start, tick=False) as traveller:
        for n in range(SUBSCRIBE_PER_MINUTE + 1):
            Client().post("/push/subscribe", subscription(n), content_type="application/json")
        traveller.shift(61)
        response = Client().post(
            "/push/subscribe", subscription(50), content_type="application/json"
        )
    assert response.status_code == 200
