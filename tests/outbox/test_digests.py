"""Digests: several rows sendable for one device and channel in one cycle go out as ONE
notification, through the real channels (the decrypting fake push service, a real SMTP
server on 127.0.0.1), while every row records its own outcome and moves its own baseline."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

import outbox.dispatch
from demo.market import set_product
from outbox.channels.base import Message
from outbox.channels.webpush import _PAYLOAD_LIMIT, _size, payload
from outbox.digests import DIGEST_TAG, MAX_ITEMS, digest_id, first_row
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.messages import dedup_key
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import (
    EmailDeviceFactory,
    ListingFactory,
    SubscribedDeviceFactory,
    WatchFactory,
    device_with_cookie,
)
from tests.fakes.push_service import b64url
from tests.fakes.smtp_server import text_and_html
from watches.models import Channel, Device, Watch

pytestmark = pytest.mark.django_db

FRESH = [990, 980, 970, 960, 950]


def _push_device(push_service, **fields) -> Device:
    subscriber = push_service.new_subscriber()
    return SubscribedDeviceFactory.create(
        push_endpoint=subscriber.endpoint,
        push_p256dh=subscriber.p256dh,
        push_auth=b64url(subscriber.auth),
        **fields,
    )


def _rows(device: Device, channel: str, n: int = 5) -> list[Outbox]:
    """`n` watches of `device` (¥1,200 lines on items detected at ¥1,000), one due row each;
    then each item's price moves to FRESH before the cycle re-fetches it."""
    watches = [
        WatchFactory.create(device=device, listing=ListingFactory(price=1000), target_price=1200)
        for _ in range(n)
    ]
    now = timezone.now()
    detected = {"value": "1000", "line": "1200", "price": 1000}
    enqueue_many(Detection(w.pk, device.pk, channel, w.trigger, now, detected) for w in watches)
    for watch, price in zip(watches, FRESH, strict=False):
        set_product(watch.listing.item_code, price=price)
    return list(Outbox.objects.filter(device=device).order_by("id"))


def _sent_digests(rows: list[Outbox]) -> list[dict]:
    digests = []
    for row in rows:
        data = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT).data
        assert data is not None, "a sent row's event records what went out"
        digests.append(data["digest"])
    return digests


def test_five_sendable_rows_of_one_device_go_out_as_one_push_carrying_five_items(push_service):
    device = _push_device(push_service)
    rows = _rows(device, Channel.WEBPUSH)

    result = run_cycle()

    [push] = push_service.accepted()
    body = push.payload
    assert push.topic == DIGEST_TAG and body["tag"] == DIGEST_TAG
    assert body["title"] == "5 things you watch are cheap now"
    assert [item["price"] for item in body["items"]] == FRESH  # each with its fresh price
    assert [item["url"] for item in body["items"]] == [
        f"/listings/{row.watch.listing_id}/" for row in rows
    ]
    assert body["url"] == "/notifications/" and body["more"] == 0
    assert result.by_status[Status.SENT] == 5
    for row, price in zip(rows, FRESH, strict=True):
        row.refresh_from_db()
        assert row.status == Status.SENT
        assert row.sent_message["price"] == price  # the row's own item
        assert Watch.objects.get(pk=row.watch_id).last_notified_price == Decimal(price)
    digests = _sent_digests(rows)
    assert {d["id"] for d in digests} == {body["digest"]} == {digest_id([r.pk for r in rows])}
    assert {d["size"] for d in digests} == {5}
    # The first row lists every row of the digest; the others name it by its id.
    assert digests[0]["rows"] == [r.pk for r in rows]
    assert first_row(body["digest"]) == rows[0].pk


def test_a_row_that_fails_its_recheck_is_not_in_the_digest(push_service):
    device = _push_device(push_service)
    rows = _rows(device, Channel.WEBPUSH)
    lost = rows[2]
    set_product(lost.watch.listing.item_code, price=1300)  # above the ¥1,200 line now

    run_cycle()

    [push] = push_service.accepted()
    assert [item["price"] for item in push.payload["items"]] == [990, 980, 960, 950]
    assert push.payload["title"] == "4 things you watch are cheap now"
    lost.refresh_from_db()
    assert (lost.status, lost.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert Watch.objects.get(pk=lost.watch_id).last_notified_price is None
    others = [row for row in rows if row.pk != lost.pk]
    assert Outbox.objects.filter(pk__in=[r.pk for r in others], status=Status.SENT).count() == 4
    assert {d["size"] for d in _sent_digests(others)} == {4}
    for row in others:
        assert Watch.objects.get(pk=row.watch_id).last_notified_price is not None


def test_a_row_alone_for_its_device_is_sent_exactly_as_before(push_service):
    rows = [_rows(_push_device(push_service), Channel.WEBPUSH, n=1)[0] for _ in range(2)]

    run_cycle()

    pushes = push_service.accepted()
    assert len(pushes) == 2
    for push in pushes:
        assert "items" not in push.payload and push.tag != DIGEST_TAG
    assert {push.tag for push in pushes} == {
        Outbox.objects.get(pk=row.pk).sent_message["tag"] for row in rows
    }
    for row in rows:
        sent = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT)
        assert "digest" not in sent.data
        assert "digest" not in Outbox.objects.get(pk=row.pk).sent_message


def test_a_digest_is_written_in_the_devices_language(push_service):
    device = _push_device(push_service, language="ja")
    _rows(device, Channel.WEBPUSH, n=3)

    run_cycle()

    [push] = push_service.accepted()
    assert push.payload["title"] == "ウォッチ中の3件が今お買い得です"


def test_five_email_rows_of_one_device_go_out_as_one_mail_with_every_item(smtp_server):
    device = EmailDeviceFactory()
    rows = _rows(device, Channel.EMAIL)

    run_cycle()

    [mail] = smtp_server.messages()
    assert mail["To"].strip() == device.email
    text, html = text_and_html(mail)
    for row, price in zip(rows, FRESH, strict=True):
        assert f"/listings/{row.watch.listing_id}/" in text
        assert f"/listings/{row.watch.listing_id}/" in html
        assert f"¥{price:,}" in text and f"¥{price:,}" in html
    assert "¥1,000" not in text  # the detected price is never what we tell
    digest = digest_id([r.pk for r in rows])
    assert re.fullmatch(rf"<outbox-digest-{digest}@[^>]+>", mail["Message-ID"].strip())
    assert mail["List-Unsubscribe-Post"].strip() == "List-Unsubscribe=One-Click"
    unsubscribe = re.fullmatch(
        r"<(https?://[^>]+/email/unsubscribe/[^>]+/)>", mail["List-Unsubscribe"].strip()
    )
    assert unsubscribe and unsubscribe.group(1) in text
    assert Outbox.objects.filter(device=device, status=Status.SENT).count() == 5
    for row in rows:
        sent = OutboxEvent.objects.get(outbox=row, to_status=Status.SENT)
        assert sent.data["digest"]["id"] == digest
        assert sent.data["delivery"]["message_id"] == mail["Message-ID"].strip()
        assert Watch.objects.get(pk=row.watch_id).last_notified_price is not None


def test_an_email_row_that_fails_its_recheck_is_not_in_the_mail(smtp_server):
    device = EmailDeviceFactory()
    rows = _rows(device, Channel.EMAIL)
    lost = rows[0]
    set_product(lost.watch.listing.item_code, price=1300)

    run_cycle()

    [mail] = smtp_server.messages()
    text, _ = text_and_html(mail)
    assert f"/listings/{lost.watch.listing_id}/" not in text
    assert len(re.findall(r"/listings/\d+/", text)) == 4
    assert Outbox.objects.get(pk=lost.pk).reason == Reason.CONDITION_LOST
    others = [r.pk for r in rows[1:]]
    assert re.fullmatch(rf"<outbox-digest-{digest_id(others)}@[^>]+>", mail["Message-ID"].strip())
    assert Outbox.objects.filter(pk__in=others, status=Status.SENT).count() == 4


def test_a_digest_that_failed_transiently_retries_each_row_on_its_own_backoff(
    push_service, settings
):
    device = _push_device(push_service)
    rows = _rows(device, Channel.WEBPUSH, n=3)
    # One row had failed before: its next wait is longer than the others'.
    Outbox.objects.filter(pk=rows[0].pk).update(retry_count=2)
    push_service.answer(503)

    run_cycle()

    for row in rows:
        row.refresh_from_db()
        assert (row.status, row.reason) == (Status.RETRY, Reason.DELIVER_SERVER)
    assert [row.retry_count for row in rows] == [3, 1, 1]
    assert rows[0].next_attempt_at > rows[1].next_attempt_at == rows[2].next_attempt_at
    failed = OutboxEvent.objects.get(outbox=rows[1], to_status=Status.RETRY)
    assert failed.data["digest"]["id"] == digest_id([r.pk for r in rows])
    assert (
        Watch.objects.filter(pk__in=[r.watch_id for r in rows], last_notified_price=None).count()
        == 3
    )

    # Due again at different times: the two that come due together form a new digest.
    run_cycle(now=rows[1].next_attempt_at + dt.timedelta(seconds=1))
    assert push_service.accepted()[-1].payload["items"][0]["price"] in FRESH
    assert len(push_service.accepted()[-1].payload["items"]) == 2
    run_cycle(now=rows[0].next_attempt_at + dt.timedelta(seconds=1))
    last = push_service.accepted()[-1]
    assert "items" not in last.payload  # alone now: sent as a row alone is
    assert Outbox.objects.filter(pk__in=[r.pk for r in rows], status=Status.SENT).count() == 3


def test_a_refused_digest_mail_counts_one_bounce(smtp_server):
    device = EmailDeviceFactory()
    rows = _rows(device, Channel.EMAIL, n=3)
    smtp_server.refuse(device.email, 550)

    run_cycle()

    assert set(
        Outbox.objects.filter(pk__in=[r.pk for r in rows]).values_list("status", "reason")
    ) == {(Status.DROPPED, Reason.RECIPIENT_REFUSED)}
    device.refresh_from_db()
    assert device.email_bounces == 1  # one mail refused, whatever the number of rows in it


def _digest_of(n: int) -> Message:
    items = tuple(
        Message(
            title="トイレットペーパー ダブル 長持ち 12ロール まとめ買い 業務用 " * 2,
            body="",
            # Seven-digit ids: the longest links and tags a digest is likely to carry.
            url=f"/listings/{1_000_000 + n}/",
            tag=f"w{1_000_000 + n}-back_in_stock-20261201",
            topic=f"w{1_000_000 + n}-back_in_stock",
            listing_id=1_000_000 + n,
            price=500 + n,
        )
        for n in range(n)
    )
    return Message(
        title=f"{n} things you watch are cheap now",
        body="\n".join(item.title for item in items),
        url="/notifications/",
        tag=DIGEST_TAG,
        topic=DIGEST_TAG,
        listing_id=None,
        price=None,
        items=items,
        rows=tuple(range(1, n + 1)),
        digest_id="d1-00000000",
    )


def test_the_biggest_push_digest_carries_every_item_whatever_their_names():
    data = payload(_digest_of(MAX_ITEMS["webpush"]))

    assert _size(data) <= _PAYLOAD_LIMIT
    assert len(data["items"]) == MAX_ITEMS["webpush"] and data["more"] == 0


def test_more_rows_than_one_push_holds_go_out_as_several_digests_that_never_replace_each_other(
    push_service,
):
    device = _push_device(push_service)
    rows = _rows(device, Channel.WEBPUSH, n=MAX_ITEMS["webpush"] + 3)

    run_cycle()

    # Delivered side by side by the pool: in either order.
    first, second = sorted(push_service.accepted(), key=lambda push: push.topic)
    assert (first.topic, first.tag) == ("digest", "digest")
    assert (second.topic, second.tag) == ("digest-2", "digest-2")
    assert [len(first.payload["items"]), len(second.payload["items"])] == [8, 3]
    assert first.payload["more"] == second.payload["more"] == 0
    # Every row sent is told in a push, by its own dedup key.
    told = push_service.deliveries_by_tag()
    for row in rows:
        row.refresh_from_db()
        assert row.status == Status.SENT and told[row.sent_message["tag"]] == 1


def test_a_push_digest_too_big_for_one_message_keeps_every_item_it_can_and_counts_the_rest():
    data = payload(_digest_of(60))

    assert _size(data) <= _PAYLOAD_LIMIT
    assert data["more"] > 0 and len(data["items"]) + data["more"] == 60
    assert [item["price"] for item in data["items"]] == [500 + n for n in range(len(data["items"]))]


def test_the_history_page_shows_a_digested_row_normally_and_says_it_went_out_together(
    push_service, client
):
    subscriber = push_service.new_subscriber()
    device, _ = device_with_cookie(
        client,
        push_endpoint=subscriber.endpoint,
        push_p256dh=subscriber.p256dh,
        push_auth=b64url(subscriber.auth),
        push_active=True,
        push_subscribed_at=timezone.now(),
    )
    rows = _rows(device, Channel.WEBPUSH, n=3)
    run_cycle()

    html = client.get("/notifications/", headers={"accept-language": "en"}).content.decode()

    assert html.count("Sent in one notification together with 2 other things you watch.") == 3
    for row, price in zip(rows, FRESH, strict=False):
        assert f"We told you: ¥{price:,}." in html
        assert row.watch.listing.name in html


def test_the_row_detail_shows_the_digest_and_links_every_row_in_it(push_service, admin_client):
    rows = _rows(_push_device(push_service), Channel.WEBPUSH, n=3)
    run_cycle()
    digest = digest_id([r.pk for r in rows])

    for row in rows:
        html = admin_client.get(reverse("admin:outbox_outbox_change", args=[row.pk])).content
        html = html.decode()
        assert digest in html
        for other in rows:
            assert f'href="{reverse("admin:outbox_outbox_change", args=[other.pk])}"' in html


def test_a_digest_mailed_but_not_recorded_is_mailed_again_as_the_same_message(
    smtp_server, monkeypatch, settings
):
    """The crash between a digest's send and the recording of its rows: the rows' intent was
    written before the send, so the takeover marks each "may have been delivered"; due again
    together, they form the same digest, and the second mail carries the first's Message-ID
    (a mail client folds the two)."""
    device = EmailDeviceFactory()
    rows = _rows(device, Channel.EMAIL, n=3)
    real_record = outbox.dispatch.record

    def crash(*args, **kwargs):
        raise RuntimeError("the dispatcher died here")

    monkeypatch.setattr(outbox.dispatch, "record", crash)
    start = timezone.now()
    run_cycle(now=start)
    monkeypatch.setattr(outbox.dispatch, "record", real_record)
    assert set(Outbox.objects.filter(device=device).values_list("status", flat=True)) == {
        Status.SENDING
    }

    later = start + dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS + 1)
    assert run_cycle(now=later).recovered == 3
    due = max(Outbox.objects.filter(device=device).values_list("next_attempt_at", flat=True))
    run_cycle(now=due + dt.timedelta(seconds=1))

    first, second = smtp_server.messages()
    assert first["Message-ID"] == second["Message-ID"]
    digest = digest_id([r.pk for r in rows])
    assert re.fullmatch(rf"<outbox-digest-{digest}@[^>]+>", second["Message-ID"].strip())
    for row in rows:
        row.refresh_from_db()
        assert row.status == Status.SENT and row.maybe_delivered
        expired = OutboxEvent.objects.get(outbox=row, reason=Reason.LEASE_EXPIRED)
        assert expired.data["may_have_been_delivered"] is True
        assert OutboxEvent.objects.filter(outbox=row, to_status=Status.SENT).count() == 1


def _crash_then_resend(monkeypatch, settings, *, before_resend=lambda: None) -> None:
    """A cycle that dies between its deliveries and their recording (its rows' intent was
    written); their lease expires, and a later cycle takes them over and sends again."""
    real_record = outbox.dispatch.record

    def crash(*args, **kwargs):
        raise RuntimeError("the dispatcher died here")

    monkeypatch.setattr(outbox.dispatch, "record", crash)
    start = timezone.now()
    run_cycle(now=start)
    monkeypatch.setattr(outbox.dispatch, "record", real_record)
    later = start + dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS + 1)
    assert run_cycle(now=later).recovered
    before_resend()
    due = max(Outbox.objects.values_list("next_attempt_at", flat=True))
    run_cycle(now=due + dt.timedelta(seconds=1))


def test_a_row_pushed_in_a_digest_is_pushed_again_under_that_digests_topic_when_it_comes_alone(
    push_service, monkeypatch, settings
):
    """Pushed with a partner in a digest, then the dispatcher died; by the re-send the
    partner's price rose past its line (dropped on the re-check). The row goes out again as
    a digest of one under the first one's Topic and tag, with its fresh price: the push
    service and the browser replace the first, so the person never sees the item twice."""
    device = _push_device(push_service)
    kept, partner = _rows(device, Channel.WEBPUSH, n=2)

    def partner_rises():
        set_product(partner.watch.listing.item_code, price=1300)
        set_product(kept.watch.listing.item_code, price=940)

    _crash_then_resend(monkeypatch, settings, before_resend=partner_rises)

    first, again = push_service.accepted()
    assert first.is_digest and set(first.tags) == {dedup_key(kept), dedup_key(partner)}
    assert (again.topic, again.tag) == (first.topic, first.tag) == (DIGEST_TAG, DIGEST_TAG)
    assert again.tags == [dedup_key(kept)] and again.payload["items"][0]["price"] == 940
    kept.refresh_from_db()
    assert kept.status == Status.SENT and kept.maybe_delivered
    assert kept.sent_message["digest"]["size"] == 1
    assert Outbox.objects.get(pk=partner.pk).reason == Reason.CONDITION_LOST


def test_a_row_pushed_alone_is_pushed_alone_again_though_others_of_its_device_come_with_it(
    push_service, monkeypatch, settings
):
    """Pushed alone (its own Topic and tag), then the dispatcher died; by the re-send two more
    rows of its device are due. It goes out alone again, under its own Topic, and the two
    new ones together: the browser replaces the first push, and the digest tells only
    what is new."""
    device = _push_device(push_service)
    (alone,) = _rows(device, Channel.WEBPUSH, n=1)

    def two_more():
        watches = [
            WatchFactory(device=device, listing=ListingFactory(price=900), target_price=950)
            for _ in range(2)
        ]
        detected = {"value": "900", "line": "950", "price": 900}
        enqueue_many(
            Detection(w.pk, device.pk, Channel.WEBPUSH, w.trigger, timezone.now(), detected)
            for w in watches
        )

    _crash_then_resend(monkeypatch, settings, before_resend=two_more)

    first, *later = push_service.accepted()
    assert not first.is_digest and first.tags == [dedup_key(alone)]
    (again,) = [r for r in later if dedup_key(alone) in r.tags]
    assert not again.is_digest and (again.topic, again.tag) == (first.topic, first.tag)
    (news,) = [r for r in later if r is not again]
    assert news.is_digest and len(news.tags) == 2 and dedup_key(alone) not in news.tags


def test_a_digest_mailed_again_with_other_rows_answers_the_first_mail(
    smtp_server, monkeypatch, settings
):
    """Three rows mailed in one digest, then the dispatcher died; by the re-send one of them
    no longer holds. The two others are mailed again in a digest of their own (its own
    Message-ID: a client that drops a repeated Message-ID would drop this one whole), which
    answers the first (In-Reply-To, References): the client shows it in that thread, after
    it."""
    device = EmailDeviceFactory()
    rows = _rows(device, Channel.EMAIL, n=3)

    _crash_then_resend(
        monkeypatch,
        settings,
        before_resend=lambda: set_product(rows[0].watch.listing.item_code, price=1300),
    )

    first, second = smtp_server.messages()
    assert first["Message-ID"] != second["Message-ID"]
    assert second["In-Reply-To"] == second["References"] == first["Message-ID"]
    assert re.fullmatch(
        rf"<outbox-digest-{digest_id([r.pk for r in rows[1:]])}@[^>]+>",
        second["Message-ID"].strip(),
    )
