"""The webpush channel end to end: outbox row → dispatch_outbox → pywebpush → a fake push
service on 127.0.0.1 that decrypts the message and verifies the VAPID signature."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import socket
import struct
import threading

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from demo.market import set_product
from outbox import vapid
from outbox.channels import webpush
from outbox.channels.base import DeliveryError, DeliveryKind, Message
from outbox.channels.webpush import WebPushChannel, payload
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue, enqueue_many
from outbox.messages import dedup_key
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import ListingFactory, WatchFactory
from tests.fakes.push_service import FakePushService, subscribe
from watches.models import Device, Trigger

pytestmark = pytest.mark.django_db

PAYLOAD_KEYS = {"title", "body", "url", "tag", "icon", "listing", "price"}


def watch_with_pending_row(device, *, trigger=Trigger.TARGET_PRICE, price=1000, **watch_fields):
    listing = ListingFactory(price=price)
    watch = WatchFactory(
        device=device,
        listing=listing,
        trigger=trigger,
        target_price=watch_fields.pop("target_price", 1200),
        **watch_fields,
    )
    detected = {"value": str(price), "line": "1200", "price": price}
    assert enqueue(watch, timezone.now(), detected)
    return watch, Outbox.objects.get(watch=watch)


def test_dispatch_sends_the_refetched_price_encrypted_and_vapid_signed(
    client, push_service, settings
):
    subscriber = push_service.new_subscriber()
    device = subscribe(client, subscriber)
    watch, row = watch_with_pending_row(device, price=1000)
    # The price moves between detection and dispatch: the message must carry the new one.
    set_product(watch.listing.item_code, price=1080)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert row.status == Status.SENT, (row.reason, row.detail)
    [received] = push_service.received
    assert received.subscriber_id == subscriber.id
    assert received.decrypt_error is None
    assert received.vapid_error is None
    assert received.vapid_key == vapid.public_key_b64()
    assert received.vapid_claims["aud"] == push_service.origin
    assert received.vapid_claims["sub"] == settings.VAPID_SUBJECT
    message = received.payload
    assert set(message) == PAYLOAD_KEYS
    assert message["price"] == 1080
    assert "¥1,080" in message["body"]
    assert "1,000" not in message["body"]
    assert message["listing"] == watch.listing_id
    assert message["url"] == f"/listings/{watch.listing_id}/"
    assert message["tag"] == dedup_key(row)
    assert received.ttl == settings.WEBPUSH_TTL == 8 * 3600
    assert received.urgency == "normal"
    assert received.topic == f"w{watch.pk}-target_price"


def test_the_push_services_answer_is_kept_in_the_sent_event(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(202)

    call_command("dispatch_outbox")

    event = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT)
    assert event.data["delivery"] == {"status_code": 202}


def test_back_in_stock_goes_out_with_high_urgency(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    watch, row = watch_with_pending_row(device, trigger=Trigger.BACK_IN_STOCK, target_price=None)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert row.status == Status.SENT, (row.reason, row.detail)
    [received] = push_service.received
    assert received.urgency == "high"
    assert received.topic == f"w{watch.pk}-back_in_stock"


def test_many_rows_go_out_concurrently_each_to_its_own_subscription(client, push_service):
    detections, subscribers = [], []
    for _ in range(5):
        subscriber = push_service.new_subscriber()
        client.cookies.clear()
        device = subscribe(client, subscriber)
        watch = WatchFactory(device=device, listing=ListingFactory(price=900))
        detections.append(Detection.for_watch(watch, timezone.now(), {"line": "1200"}))
        subscribers.append(subscriber)
    assert enqueue_many(detections) == 5

    call_command("dispatch_outbox")

    assert Outbox.objects.filter(status=Status.SENT).count() == 5
    assert sorted(r.subscriber_id for r in push_service.received) == sorted(
        s.id for s in subscribers
    )
    assert all(r.payload["price"] == 900 for r in push_service.received)


@pytest.mark.parametrize(
    ("status", "to", "reason"),
    [
        (404, Status.DROPPED, Reason.SUBSCRIPTION_GONE),
        (410, Status.DROPPED, Reason.SUBSCRIPTION_GONE),
        (500, Status.RETRY, Reason.DELIVER_SERVER),
        (503, Status.RETRY, Reason.DELIVER_SERVER),
        (400, Status.FAILED, Reason.DELIVER_REJECTED),
        (401, Status.FAILED, Reason.DELIVER_REJECTED),
        (403, Status.FAILED, Reason.DELIVER_REJECTED),
        (413, Status.FAILED, Reason.DELIVER_REJECTED),
    ],
)
def test_push_service_answer_lands_in_its_outcome(client, push_service, status, to, reason):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(status, f"answer {status} from the fake")

    call_command("dispatch_outbox")

    row.refresh_from_db()
    device.refresh_from_db()
    assert (row.status, row.reason) == (to, reason)
    event = OutboxEvent.objects.filter(outbox=row).latest("id")
    assert (event.to_status, event.reason, event.data["status_code"]) == (to, reason, status)
    # 404/410 switch the subscription off; nothing else does.
    assert device.push_active is (status not in (404, 410))
    assert device.push_endpoint  # kept for staff; only deactivated


def test_413_keeps_the_push_services_words_for_staff(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(413, "Payload Too Large: 4200 bytes exceeds the 4096-byte limit")

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.FAILED, Reason.DELIVER_REJECTED)
    assert "413" in row.detail
    assert "exceeds the 4096-byte limit" in row.detail
    event = OutboxEvent.objects.filter(outbox=row, to_status=Status.FAILED).get()
    assert "exceeds the 4096-byte limit" in event.detail


def test_long_refusal_text_is_truncated(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(400, "x" * 5000)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert row.status == Status.FAILED
    assert len(row.detail) < 600
    assert row.detail.endswith("…")


def test_429_retries_after_the_services_retry_after(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(429, "slow down", {"Retry-After": "600"})

    before = timezone.now()
    call_command("dispatch_outbox")
    after = timezone.now()

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_RATE_LIMITED)
    wait = dt.timedelta(seconds=600)
    assert before + wait <= row.next_attempt_at <= after + wait
    assert row.retry_count == 1


def test_a_stall_past_the_read_timeout_is_a_network_retry(client, push_service, settings):
    settings.WEBPUSH_READ_TIMEOUT = 0.3
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(201, delay=2.0)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    assert "timed out" in row.detail
    # The service had the push and may have taken it before the answer came.
    assert row.maybe_delivered
    retried = row.events.get(to_status=Status.RETRY)
    assert retried.data["may_have_been_delivered"] is True


def test_a_push_that_timed_out_after_the_service_took_it_is_resent_in_the_same_form(
    client, push_service, settings, time_machine
):
    """Sent again inside a digest, under the digest's Topic and tag, it would show twice;
    alone under its own, the device replaces the first (decision 0066)."""
    settings.WEBPUSH_READ_TIMEOUT = 0.3
    device = subscribe(client, push_service.new_subscriber())
    _, first = watch_with_pending_row(device)
    push_service.answer(201, delay=1.0)  # taken on, answered too late

    run_cycle()

    first.refresh_from_db()
    assert (first.status, first.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    [taken] = push_service.accepted()
    told = dedup_key(first)
    assert taken.tags == [told]
    # Another of the device's watches comes due with it when it is tried again.
    watch_with_pending_row(device)
    time_machine.move_to(timezone.now() + dt.timedelta(minutes=10))
    run_cycle()

    first.refresh_from_db()
    assert first.status == Status.SENT, (first.reason, first.detail)
    again = [r for r in push_service.accepted() if told in r.tags]
    assert len(again) == 2
    assert {(r.topic, r.tag) for r in again} == {(taken.topic, taken.tag)}


def test_a_refused_connection_is_a_network_retry(client, push_service, settings):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    settings.PUSH_SERVICE_HOSTS = [*settings.PUSH_SERVICE_HOSTS, dead]
    Device.objects.filter(pk=device.pk).update(push_endpoint=f"{dead}/wpush/v2/gone-away")

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    assert dead not in row.detail  # the endpoint is a capability; errors do not repeat it
    assert not row.maybe_delivered  # never reached: nothing may have been taken


def test_a_connection_reset_once_the_push_was_sent_may_have_delivered_it(
    client, push_service, settings
):
    """The service read the whole request, then the connection dropped: it may have taken
    the push, so the retry must go out in the same form."""
    device = subscribe(client, push_service.new_subscriber())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def read_then_reset() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        seen = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in seen and (chunk := conn.recv(65536)):
                seen += chunk
        # SO_LINGER 0: the client gets an RST instead of an answer.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    thread = threading.Thread(target=read_then_reset, daemon=True)
    thread.start()
    origin = f"http://127.0.0.1:{listener.getsockname()[1]}"
    settings.PUSH_SERVICE_HOSTS = [*settings.PUSH_SERVICE_HOSTS, origin]
    Device.objects.filter(pk=device.pk).update(push_endpoint=f"{origin}/wpush/v2/reset")
    device.refresh_from_db()
    try:
        with pytest.raises(DeliveryError) as caught:
            WebPushChannel().deliver_to(device, message())
    finally:
        thread.join(5)
        listener.close()
    assert caught.value.kind == DeliveryKind.NETWORK
    assert caught.value.maybe_delivered


def test_a_redirect_is_never_followed(client, push_service, settings):
    elsewhere = FakePushService(subject=settings.VAPID_SUBJECT).start()
    try:
        target = elsewhere.new_subscriber()
        device = subscribe(client, push_service.new_subscriber())
        _, row = watch_with_pending_row(device)
        push_service.answer(307, "", {"Location": target.endpoint})

        call_command("dispatch_outbox")

        row.refresh_from_db()
        assert (row.status, row.reason) == (Status.FAILED, Reason.DELIVER_REJECTED)
        assert elsewhere.received == []
    finally:
        elsewhere.stop()


def test_an_endpoint_no_longer_on_the_allowlist_is_not_contacted(client, push_service, settings):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    settings.PUSH_SERVICE_HOSTS = ["fcm.googleapis.com"]

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.FAILED, Reason.DELIVER_REJECTED)
    assert "PUSH_SERVICE_HOSTS" in row.detail
    assert push_service.received == []


def test_a_missing_vapid_key_retries_without_leaking_anything(
    client, push_service, settings, tmp_path, caplog
):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    settings.VAPID_PRIVATE_KEY = ""
    settings.VAPID_PRIVATE_KEY_FILE = tmp_path / "missing.pem"

    with caplog.at_level(logging.DEBUG):
        call_command("dispatch_outbox")

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_SERVER)
    assert "vapid_keys --ensure" in row.detail
    assert push_service.received == []


@pytest.mark.django_db(transaction=True)
def test_gone_for_an_old_endpoint_leaves_the_new_subscription_on(client, push_service):
    """The browser re-subscribed while the push to its old endpoint was in flight: the 410
    for the old endpoint must not switch off the new one."""
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    renewed = push_service.new_subscriber()

    def resubscribe_meanwhile():
        Device.objects.filter(pk=device.pk).update(push_endpoint=renewed.endpoint)
        connection.close()  # this runs on the fake's server thread

    push_service.answer(410, "expired", before=resubscribe_meanwhile)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    device.refresh_from_db()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.SUBSCRIPTION_GONE)
    assert device.push_endpoint == renewed.endpoint
    assert device.push_active is True


def test_the_private_key_is_never_logged_or_stored(client, push_service, settings, caplog):
    device = subscribe(client, push_service.new_subscriber())
    _, row = watch_with_pending_row(device)
    push_service.answer(403, "invalid JWT")

    with caplog.at_level(logging.DEBUG):
        call_command("dispatch_outbox")

    row.refresh_from_db()
    secret = settings.VAPID_PRIVATE_KEY
    assert secret not in caplog.text
    assert secret not in row.detail
    assert all(secret not in (e.detail + str(e.data)) for e in OutboxEvent.objects.all())


# --- The channel on its own ---------------------------------------------------------------


def message(**overrides) -> Message:
    fields = {
        "title": "トイレットペーパー",
        "body": "Now ¥980",
        "url": "/listings/1/",
        "tag": "w1-x",
        "topic": "w1-target_price",
        "listing_id": 1,
        "price": 980,
    }
    return Message(**{**fields, **overrides})


def test_pushes_to_one_push_service_share_a_token_for_an_hour_then_get_a_new_one(
    client, push_service, time_machine
):
    time_machine.move_to(dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC), tick=False)
    device = subscribe(client, push_service.new_subscriber())
    channel = WebPushChannel()
    channel.deliver_to(device, message())
    time_machine.move_to(dt.datetime(2026, 12, 1, 9, 59, tzinfo=dt.UTC), tick=False)
    channel.deliver_to(device, message(title="again"))
    time_machine.move_to(dt.datetime(2026, 12, 1, 10, 0, 1, tzinfo=dt.UTC), tick=False)
    channel.deliver_to(device, message(title="an hour on"))

    first, second, third = push_service.received
    assert [r.vapid_error for r in (first, second, third)] == [None, None, None]
    assert [r.payload["title"] for r in (first, second, third)] == [
        "トイレットペーパー",
        "again",
        "an hour on",
    ]
    # One signature for the hour: the same token, still 11 hours from expiring when reused.
    assert first.headers["authorization"] == second.headers["authorization"]
    nine = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC).timestamp()
    assert first.vapid_claims["exp"] == nine + vapid.TOKEN_LIFETIME
    # Past the hour, a new token, signed for 12 hours from then.
    assert third.headers["authorization"] != first.headers["authorization"]
    assert third.vapid_claims["exp"] == nine + 3601 + vapid.TOKEN_LIFETIME


def test_each_push_service_gets_a_token_for_its_own_origin(client, push_service, settings):
    other = FakePushService(subject=settings.VAPID_SUBJECT).start()
    try:
        settings.PUSH_SERVICE_HOSTS = [*settings.PUSH_SERVICE_HOSTS, other.origin]
        here = subscribe(client, push_service.new_subscriber())
        there = subscribe(Client(), other.new_subscriber())  # another browser
        channel = WebPushChannel()
        channel.deliver_to(here, message())
        channel.deliver_to(there, message())
        channel.deliver_to(here, message(title="again"))
    finally:
        other.stop()
    # Each service checks that `aud` is its own origin: a token signed for the first service
    # would not verify at the second.
    assert [r.vapid_error for r in push_service.received] == [None, None]
    assert [r.vapid_error for r in other.received] == [None]
    assert other.received[0].vapid_claims["aud"] == other.origin


def test_channel_leaves_out_a_topic_that_is_not_url_safe(client, push_service):
    device = subscribe(client, push_service.new_subscriber())
    WebPushChannel().deliver_to(device, message(topic="not a valid topic!", urgency="urgent"))

    [received] = push_service.received
    assert received.topic is None
    assert received.urgency == "normal"


def test_a_delivery_thread_reads_the_environment_once_per_push_service(
    client, push_service, monkeypatch
):
    import requests.sessions

    # This thread's session, as a delivery thread starts: one an earlier test left may have
    # kept the answer for this origin already (the OS hands out a freed port again).
    monkeypatch.delattr(webpush._local, "session", raising=False)
    lookups = []
    real = requests.sessions.get_environ_proxies

    def counted(url, no_proxy=None):
        lookups.append(url)
        return real(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    device = subscribe(client, push_service.new_subscriber())
    channel = WebPushChannel()
    for title in ("one", "two", "three"):
        channel.deliver_to(device, message(title=title))

    assert [r.payload["title"] for r in push_service.received] == ["one", "two", "three"]
    assert len(lookups) == 1  # a new session: asked once, then kept


def test_the_environments_proxies_still_apply_and_no_proxy_still_exempts(monkeypatch):
    from outbox.channels.webpush import _NoRedirectSession

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "push.exempt.example")
    session = _NoRedirectSession()

    def proxies(url: str) -> dict:
        return session.merge_environment_settings(url, {}, None, None, None)["proxies"]

    assert proxies("https://push.example/a")["https"] == "http://proxy.invalid:3128"
    assert proxies("https://push.example/b")["https"] == "http://proxy.invalid:3128"  # kept
    assert "https" not in proxies("https://push.exempt.example/c")
    # A request that asks for proxies of its own gets them, as requests would give them.
    own = session.merge_environment_settings(
        "https://push.example/d", {"https": "http://mine.invalid:1"}, None, None, None
    )
    assert own["proxies"]["https"] == "http://mine.invalid:1"


def test_a_netrc_entry_for_the_push_service_never_replaces_the_vapid_header(
    client, push_service, monkeypatch, tmp_path
):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    device = subscribe(client, push_service.new_subscriber())

    WebPushChannel().deliver_to(device, message())

    [received] = push_service.received
    assert received.vapid_error is None and received.accepted


def test_channel_without_a_subscription_says_gone():
    with pytest.raises(DeliveryError) as caught:
        WebPushChannel().deliver_to(Device(token_hash="x"), message())
    assert caught.value.kind == DeliveryKind.GONE


def test_payload_is_trimmed_to_fit_a_push_message():
    data = payload(message(icon="https://img.example/" + "a" * 4000, body="b" * 3000))
    assert data["icon"] == ""
    assert len(data["body"]) == 200
    assert set(data) == PAYLOAD_KEYS


def test_a_push_digest_never_tells_a_price_whose_shipping_is_unknown_as_if_shipping_were_free(
    push_service,
):
    """A digest's line names an item and its price: a price whose shipping the shop did not
    name says so there too, as the item's own message does."""
    from django.utils import timezone

    from demo.models import DemoProduct
    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many
    from tests.factories import SubscribedDeviceFactory
    from tests.fakes.push_service import b64url
    from watches.models import Channel

    subscriber = push_service.new_subscriber()
    device = SubscribedDeviceFactory.create(
        push_endpoint=subscriber.endpoint,
        push_p256dh=subscriber.p256dh,
        push_auth=b64url(subscriber.auth),
    )
    watches = [
        WatchFactory.create(device=device, listing=ListingFactory(price=1000), target_price=1200)
        for _ in range(2)
    ]
    detected = {"value": "1000", "line": "1200", "price": 1000}
    enqueue_many(
        Detection(w.pk, device.pk, Channel.WEBPUSH, w.trigger, timezone.now(), detected)
        for w in watches
    )
    unknown, known = watches
    DemoProduct.objects.filter(item_code=unknown.listing.item_code).update(price=900, shipping=None)
    DemoProduct.objects.filter(item_code=known.listing.item_code).update(price=950, shipping=0)

    run_cycle()

    from outbox.models import Outbox

    own = Outbox.objects.get(watch=unknown).sent_message
    assert own["body"].endswith("(shipping unknown)"), own  # the row's own message says so
    [push] = push_service.accepted()
    assert push.payload.get("items"), push.payload  # one digest of both items
    line = next(text for text in push.payload["body"].splitlines() if "¥900" in text)
    assert "shipping unknown" in line, push.payload["body"]
