"""The e-mail channel end to end: an outbox row → a dispatch cycle → Django's SMTP backend →
a real SMTP server on 127.0.0.1, and every SMTP failure kind mapped to its outcome."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from demo.market import set_product
from outbox.channels.base import DeliveryKind
from outbox.channels.email import classify
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, detections_for, enqueue_many
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import (
    EmailDeviceFactory,
    ListingFactory,
    SubscribedDeviceFactory,
    WatchFactory,
)
from tests.fakes.smtp_server import StalledServer, free_port, text_and_html
from watches.models import Channel, Device, NotifyVia

pytestmark = pytest.mark.django_db


def email_row(device=None, *, price=1000, target=1200):
    device = device or EmailDeviceFactory()
    watch = WatchFactory(device=device, listing=ListingFactory(price=price), target_price=target)
    detected = {"value": str(price), "line": str(target), "price": price}
    assert (
        enqueue_many(
            [Detection(watch.pk, device.pk, Channel.EMAIL, watch.trigger, timezone.now(), detected)]
        )
        == 1
    )
    return watch, Outbox.objects.get(watch=watch, channel=Channel.EMAIL)


def test_notification_mail_carries_fresh_price_both_parts_message_id_and_rfc8058_headers(
    smtp_server,
):
    watch, row = email_row(price=1000)
    # The price moves between detection and dispatch: the mail must carry the new one.
    set_product(watch.listing.item_code, price=980)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert row.status == Status.SENT, (row.reason, row.detail)
    [mail] = smtp_server.messages()
    assert mail["To"].strip() == watch.device.email
    assert re.fullmatch(rf"<outbox-{row.pk}@[^>]+>", mail["Message-ID"].strip())
    assert mail["List-Unsubscribe-Post"].strip() == "List-Unsubscribe=One-Click"
    unsubscribe = re.fullmatch(
        r"<(https?://[^>]+/email/unsubscribe/[^>]+/)>", mail["List-Unsubscribe"].strip()
    )
    assert unsubscribe
    text, html = text_and_html(mail)
    assert "¥980" in text and "¥980" in html
    assert "¥1,000" not in text
    assert unsubscribe.group(1) in text
    assert unsubscribe.group(1).replace("&", "&amp;") in html
    sent = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT)
    assert sent.data["delivery"]["message_id"] == mail["Message-ID"].strip()


def test_mail_is_written_in_the_devices_language(smtp_server):
    email_row(EmailDeviceFactory(language="ja"))
    run_cycle()
    [mail] = smtp_server.messages()
    text, html = text_and_html(mail)
    assert "メール通知を停止" in text and "商品を見る" in html
    assert "ご指定の¥1,200以下です" in mail["Subject"]


def test_one_click_post_from_the_mail_header_unsubscribes_without_cookie_or_csrf(smtp_server):
    watch, _row = email_row()
    run_cycle()
    [mail] = smtp_server.messages()
    url = re.fullmatch(r"<https?://[^/]+(/[^>]+)>", mail["List-Unsubscribe"].strip()).group(1)

    response = Client(enforce_csrf_checks=True).post(
        url, "List-Unsubscribe=One-Click", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 200
    device = Device.objects.get(pk=watch.device_id)
    assert device.email == "" and not device.email_active


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        (550, Status.DROPPED, Reason.RECIPIENT_REFUSED),
        (451, Status.RETRY, Reason.DELIVER_SERVER),
    ],
)
def test_smtp_recipient_answer_maps_to_outcome(smtp_server, code, status, reason):
    watch, row = email_row()
    smtp_server.refuse(watch.device.email, code)
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (status, reason)
    assert str(code) in row.detail


def test_smtp_4xx_at_data_is_retried_and_5xx_at_data_fails(smtp_server):
    _, row = email_row()
    smtp_server.answer_data(452)
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_SERVER)

    _, other = email_row()
    smtp_server.answer_data(554)
    run_cycle()
    other.refresh_from_db()
    assert (other.status, other.reason) == (Status.FAILED, Reason.DELIVER_REJECTED)


def test_connection_refused_is_retried_as_network(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    _, row = email_row()
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    assert not row.maybe_delivered  # never reached


def test_a_server_that_never_answers_times_out_and_is_retried(settings):
    stalled = StalledServer()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", stalled.port
        settings.EMAIL_TIMEOUT = 0.5
        _, row = email_row()
        run_cycle()
    finally:
        stalled.stop()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    assert "timed out" in row.detail
    assert not row.maybe_delivered  # no greeting: the mail was never handed over


def test_a_mail_that_timed_out_after_data_is_resent_in_the_same_form(
    smtp_server, settings, time_machine
):
    """The server may have taken the mail before its answer came: the row is marked
    `maybe_delivered`, and goes again alone, under the same Message-ID (decision 0066)."""
    settings.EMAIL_TIMEOUT = 0.3
    smtp_server.delay = 1.0  # takes the mail, answers too late
    device = EmailDeviceFactory()
    _, first = email_row(device)

    run_cycle()

    first.refresh_from_db()
    assert (first.status, first.reason) == (Status.RETRY, Reason.DELIVER_NETWORK)
    assert first.maybe_delivered
    assert first.events.get(to_status=Status.RETRY).data["may_have_been_delivered"] is True
    # Another of the device's watches comes due with it when it is tried again.
    smtp_server.delay, settings.EMAIL_TIMEOUT = 0.0, 5.0
    smtp_server.clear()
    email_row(device)
    time_machine.move_to(timezone.now() + dt.timedelta(minutes=10))
    run_cycle()

    first.refresh_from_db()
    assert first.status == Status.SENT, (first.reason, first.detail)
    # Alone, as the first attempt went, not in a digest with the other: a client folds it.
    again = [mail["Message-ID"] for mail in smtp_server.messages()]
    assert len(again) == 2 and not any("digest" in told for told in again), again
    assert any(told.startswith(f"<outbox-{first.pk}@") for told in again), again


def test_classify_maps_every_smtp_failure_kind():
    import smtplib

    assert (
        classify(smtplib.SMTPRecipientsRefused({"a@b.c": (550, b"no")})).kind
        == DeliveryKind.BOUNCED
    )
    assert (
        classify(smtplib.SMTPRecipientsRefused({"a@b.c": (450, b"busy")})).kind
        == DeliveryKind.SERVER
    )
    assert (
        classify(smtplib.SMTPSenderRefused(553, b"bad sender", "x@y")).kind == DeliveryKind.REJECTED
    )
    assert classify(smtplib.SMTPDataError(421, b"closing")).kind == DeliveryKind.SERVER
    assert (
        classify(smtplib.SMTPAuthenticationError(535, b"bad login")).kind == DeliveryKind.REJECTED
    )
    assert classify(smtplib.SMTPServerDisconnected("gone")).kind == DeliveryKind.NETWORK
    assert classify(ConnectionRefusedError()).kind == DeliveryKind.NETWORK
    assert classify(TimeoutError()).kind == DeliveryKind.NETWORK


def test_hard_bounces_up_to_the_limit_disable_the_address_and_settings_say_so(
    smtp_server, settings, client
):
    from tests.factories import device_with_cookie

    settings.EMAIL_BOUNCE_LIMIT = 2
    device, _token = device_with_cookie(
        client,
        notify_via=NotifyVia.EMAIL,
        email="gone@mail.example",
        email_confirmed_at=timezone.now(),
    )
    smtp_server.refuse("gone@mail.example", 550)
    email_row(device)
    run_cycle()
    device.refresh_from_db()
    assert device.email_bounces == 1 and device.email_disabled_at is None

    email_row(device)
    run_cycle()
    device.refresh_from_db()
    assert device.email_bounces == 2 and device.email_disabled_at is not None
    assert not device.email_active

    page = client.get("/settings/").content.decode()
    assert 'data-email-status="disabled"' in page
    # Nothing more goes out to it: the next row is dropped before any SMTP conversation.
    _, row = email_row(device)
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.NO_EMAIL)


def test_nothing_is_sent_to_an_unconfirmed_address(smtp_server):
    device = EmailDeviceFactory(email_confirmed_at=None)
    _, row = email_row(device)
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.NO_EMAIL)
    assert smtp_server.messages() == []


def test_a_device_told_by_both_gets_one_row_per_channel(smtp_server):
    device = SubscribedDeviceFactory(
        notify_via=NotifyVia.BOTH, email="both@mail.example", email_confirmed_at=timezone.now()
    )
    watch = WatchFactory(device=device)
    detections = detections_for(watch, timezone.now(), {"price": 900})
    assert sorted(d.channel for d in detections) == [Channel.EMAIL, Channel.WEBPUSH]
    assert enqueue_many(detections) == 2
    # Twice the same day folds per channel, as ever.
    assert enqueue_many(detections_for(watch, timezone.now() + dt.timedelta(minutes=5), {})) == 0


def test_push_only_or_unconfirmed_address_enqueues_no_email_row():
    device = SubscribedDeviceFactory(notify_via=NotifyVia.BOTH, email="x@mail.example")
    watch = WatchFactory(device=device)
    assert [d.channel for d in detections_for(watch, timezone.now(), {})] == [Channel.WEBPUSH]
    device.notify_via = NotifyVia.PUSH
    device.email_confirmed_at = timezone.now()
    assert [d.channel for d in detections_for(watch, timezone.now(), {})] == [Channel.WEBPUSH]


def test_a_poll_enqueues_one_row_per_channel_of_a_device_told_by_both(smtp_server):
    from watches.polling.poll import poll_batch

    device = SubscribedDeviceFactory(
        notify_via=NotifyVia.BOTH, email="both@mail.example", email_confirmed_at=timezone.now()
    )
    listing = ListingFactory(price=1500)
    WatchFactory(device=device, listing=listing, target_price=1200)
    set_product(listing.item_code, price=1100)

    assert poll_batch(listing.source, [listing.pk]).enqueued == 2
    assert sorted(Outbox.objects.values_list("channel", flat=True)) == [
        Channel.EMAIL,
        Channel.WEBPUSH,
    ]


def test_a_poll_for_a_device_told_by_unconfirmed_email_only_keeps_a_missed_detection():
    from watches.polling.poll import poll_batch

    device = EmailDeviceFactory(email_confirmed_at=None)
    listing = ListingFactory(price=1500)
    watch = WatchFactory(device=device, listing=listing, target_price=1200)
    set_product(listing.item_code, price=1100)

    assert poll_batch(listing.source, [listing.pk]).enqueued == 0
    watch.refresh_from_db()
    assert watch.missed_price == 1100


def test_a_bounce_counts_only_while_the_address_is_still_the_devices():
    from watches.services import record_bounces

    device = EmailDeviceFactory(email="new@mail.example")
    record_bounces([(device.pk, "old@mail.example"), (device.pk, "")], timezone.now())
    device.refresh_from_db()
    assert device.email_bounces == 0
    record_bounces([(device.pk, "new@mail.example")], timezone.now())
    device.refresh_from_db()
    assert device.email_bounces == 1


def test_staff_find_email_rows_by_the_channel_filter(admin_client):
    from tests.staff.test_admin_pages import listed

    _, row = email_row()
    WatchFactory()  # a console device's watch, no row
    assert listed(admin_client, "?channel__exact=email") == [row.pk]
    page = admin_client.get(f"/admin/outbox/outbox/{row.pk}/change/").content.decode()
    assert "E-mail" in page


# --- found in review ---------------------------------------------------------------------

_DETECTED = {"value": "1000", "line": "1200", "price": 1000}


def _email_row(device: Device, **listing) -> Outbox:
    watch = WatchFactory.create(
        device=device, listing=ListingFactory(price=1000, **listing), target_price=1200
    )
    detection = Detection(
        watch.pk, device.pk, Channel.EMAIL, watch.trigger, timezone.now(), _DETECTED
    )
    assert enqueue_many([detection]) == 1
    return Outbox.objects.get(watch=watch)


def test_a_device_told_by_both_still_gets_the_mail_after_a_transient_smtp_failure(
    smtp_server, recording_channel
):
    device = EmailDeviceFactory(notify_via=NotifyVia.BOTH, channel=Channel.CONSOLE)
    watch = WatchFactory(device=device, listing=ListingFactory(price=1000), target_price=1200)
    start = timezone.now()
    assert enqueue_many(detections_for(watch, start, _DETECTED)) == 2
    console = Outbox.objects.get(watch=watch, channel=Channel.CONSOLE)
    email = Outbox.objects.get(watch=watch, channel=Channel.EMAIL)
    smtp_server.refuse(device.email, 451)  # greylisting: "try again later"
    run_cycle()
    console.refresh_from_db()
    email.refresh_from_db()
    assert console.status == Status.SENT
    assert (email.status, email.reason) == (Status.RETRY, Reason.DELIVER_SERVER)

    smtp_server.refused.clear()
    # The price has not moved: the mail goes out after its backoff, not `already_notified`.
    with time_machine.travel(start + dt.timedelta(minutes=5), tick=False):
        run_cycle()
    email.refresh_from_db()
    assert (email.status, email.reason) == (Status.SENT, Reason.DELIVERED)
    assert len(smtp_server.messages()) == 1


def test_a_device_told_by_both_gets_both_when_its_rows_fall_in_separate_batches(
    smtp_server, recording_channel, settings
):
    settings.OUTBOX_BATCH_SIZE = 1
    device = EmailDeviceFactory(notify_via=NotifyVia.BOTH, channel=Channel.CONSOLE)
    watch = WatchFactory(device=device, listing=ListingFactory(price=1000), target_price=1200)
    assert enqueue_many(detections_for(watch, timezone.now(), _DETECTED)) == 2

    run_cycle()

    rows = dict(Outbox.objects.filter(watch=watch).values_list("channel", "status"))
    assert rows == {Channel.CONSOLE: Status.SENT, Channel.EMAIL: Status.SENT}
    assert len(smtp_server.messages()) == 1
    watch.refresh_from_db()
    # Both rows are one detection's: the baseline names it.
    (detected_at,) = {row.detected_at for row in Outbox.objects.filter(watch=watch)}
    assert watch.last_notified_detected_at == detected_at


def test_an_email_for_an_item_whose_name_has_a_line_break_is_delivered(smtp_server):
    row = _email_row(EmailDeviceFactory(), name="トイレットペーパー 12ロール\n送料無料")
    run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT, (row.status, row.reason, row.detail)
    (mail,) = smtp_server.messages()
    assert "トイレットペーパー 12ロール 送料無料" in mail["Subject"]


def test_a_garbled_smtp_greeting_is_retried_not_failed_at_once(settings):
    # A server (or a middlebox before it) answering with a line that is no SMTP reply:
    # smtplib raises SMTPConnectError(-1, …) — the way to the server, not a 5xx on our mail.
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve():
        conn, _ = listener.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", listener.getsockname()[1]
    row = _email_row(EmailDeviceFactory())
    run_cycle()
    thread.join(5)
    listener.close()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_NETWORK), row.detail
