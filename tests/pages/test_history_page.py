"""The notification history page: everything the outbox did for this browser, newest first —
sent with the price told, withheld with the reason in plain words, on the way."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.test import Client

from outbox.models import Outbox, Reason, Status
from outbox.reporting import explain
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, device_with_cookie

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)

# Where each reason can end up (DESIGN.md's vocabulary, plus the refusal that fails at once).
DROPPED_REASONS = [
    Reason.WATCH_REMOVED,
    Reason.WATCH_PAUSED,
    Reason.LISTING_PAUSED,
    Reason.NO_SUBSCRIPTION,
    Reason.SUBSCRIPTION_GONE,
    Reason.NO_EMAIL,
    Reason.CHANNEL_OFF,
    Reason.RECIPIENT_REFUSED,
    Reason.OUT_OF_STOCK,
    Reason.ITEM_NOT_FOUND,
    Reason.CONDITION_LOST,
    Reason.POINTS_ENDED,
    Reason.SUPERSEDED,
    Reason.ALREADY_NOTIFIED,
    Reason.MANUAL,
]
RETRY_REASONS = [
    Reason.REFETCH_RATE_LIMITED,
    Reason.REFETCH_NETWORK,
    Reason.REFETCH_SERVER,
    Reason.REFETCH_BAD_RESPONSE,
    Reason.DELIVER_RATE_LIMITED,
    Reason.DELIVER_NETWORK,
    Reason.DELIVER_SERVER,
    Reason.LEASE_EXPIRED,
    Reason.FRESH_VALUE_EXPIRED,
]
FAILED_REASONS = [*RETRY_REASONS, Reason.DELIVER_REJECTED]


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def row(watch, status: str, reason: str = "", *, age: dt.timedelta = dt.timedelta(0), message=None):
    """An outbox row as the dispatcher would have left it."""
    at = NOW - age
    return Outbox.objects.create(
        watch=watch,
        device=watch.device,
        channel=watch.device.channel,
        trigger=watch.trigger,
        status=status,
        reason=reason,
        detected_at=at - dt.timedelta(minutes=5),
        next_attempt_at=at,
        sent_message=message,
        sent_at=at if status == Status.SENT else None,
        created_at=at - dt.timedelta(minutes=5),
        updated_at=at,
    )


def test_every_reason_has_plain_words():
    assert set(explain.WITHHELD_BECAUSE) == set(DROPPED_REASONS)
    assert set(explain.FAILED_BECAUSE) == set(FAILED_REASONS)
    assert set(explain.RETRYING_BECAUSE) == {
        *RETRY_REASONS,
        Reason.QUIET_HOURS,
        Reason.BUDGET_UNAVAILABLE,
        Reason.MARKETPLACE_HALTED,
    }
    words = [*explain.WITHHELD_BECAUSE.values(), *explain.FAILED_BECAUSE.values()]
    assert len({str(w) for w in words}) == len(words), "each reason says something of its own"
    for reason in [*DROPPED_REASONS, *FAILED_REASONS]:
        assert reason.value not in str(
            explain.explain(reason, Status.DROPPED if reason in DROPPED_REASONS else Status.FAILED)
        )


@pytest.mark.parametrize("reason", DROPPED_REASONS)
def test_a_withheld_notification_says_why_in_words(client, reason):
    device, _ = device_with_cookie(client)
    row(WatchFactory(device=device), Status.DROPPED, reason)
    body = client.get("/notifications/").content.decode()
    assert "Not sent" in body
    assert str(explain.WITHHELD_BECAUSE[reason]).replace("'", "&#x27;") in body
    assert f">{reason.value}<" not in body


@pytest.mark.parametrize("reason", FAILED_REASONS)
def test_a_failed_notification_says_why_in_words(client, reason):
    device, _ = device_with_cookie(client)
    row(WatchFactory(device=device), Status.FAILED, reason)
    body = client.get("/notifications/").content.decode()
    assert "Could not be sent" in body
    assert str(explain.FAILED_BECAUSE[reason]).replace("'", "&#x27;") in body


@pytest.mark.parametrize("status", [Status.DROPPED, Status.FAILED])
def test_a_row_that_may_have_been_delivered_says_so_instead_of_withheld(client, status):
    device, _ = device_with_cookie(client)
    maybe = row(WatchFactory(device=device), status, Reason.CONDITION_LOST)
    Outbox.objects.filter(pk=maybe.pk).update(maybe_delivered=True)
    body = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "May have been sent" in body
    assert "This may already have reached you" in body
    assert "Not sent" not in body and "Could not be sent" not in body
    assert "The price went back up" not in body
    body_ja = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "届いているかもしれません" in body_ja


def test_plain_words_for_the_examples_of_the_issue(client):
    device, _ = device_with_cookie(client)
    row(WatchFactory(device=device), Status.DROPPED, Reason.CONDITION_LOST)
    row(WatchFactory(device=device), Status.DROPPED, Reason.OUT_OF_STOCK)
    row(WatchFactory(device=device), Status.DROPPED, Reason.WATCH_REMOVED)
    body = client.get("/notifications/").content.decode()
    assert "The price went back up before we could tell you." in body
    assert "The item sold out before we could tell you." in body
    assert "You removed this watch." in body


def test_sent_shows_the_price_told(client):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=ListingFactory(name="スコッティ 12ロール"))
    row(
        watch,
        Status.SENT,
        Reason.DELIVERED,
        message={"price": 880, "body": "Now ¥880 — at or below your ¥900."},
    )
    body = client.get("/notifications/").content.decode()
    assert "Sent" in body and "We told you: ¥880." in body
    assert "Now ¥880 — at or below your ¥900." in body
    assert "スコッティ 12ロール" in body and f'href="/listings/{watch.listing_id}/"' in body
    assert 'datetime="2026-11-29T12:00:00+09:00"' in body, "Tokyo time"
    assert "Nov 29, 12:00" in body


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (Status.PENDING, ""),
        (Status.SENDING, Reason.CLAIMED),
        (Status.RETRY, Reason.REFETCH_NETWORK),
    ],
)
def test_pending_sending_and_retry_are_on_the_way(client, status, reason):
    device, _ = device_with_cookie(client)
    row(WatchFactory(device=device), status, reason)
    body = client.get("/notifications/").content.decode()
    assert "On the way" in body
    if status == Status.RETRY:
        assert "The shop could not be reached; we will try again shortly." in body


def test_newest_first_and_paginated(client):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device)
    rows = [
        row(watch, Status.DROPPED, Reason.CONDITION_LOST, age=dt.timedelta(hours=h))
        for h in range(25)
    ]
    page1 = client.get("/notifications/")
    assert [e.row.pk for e in page1.context["entries"]] == [r.pk for r in rows[:20]]
    assert "Page 1 of 2" in page1.content.decode()
    page2 = client.get("/notifications/", {"page": "2"})
    assert [e.row.pk for e in page2.context["entries"]] == [r.pk for r in rows[20:]]
    assert client.get("/notifications/", {"page": "zzz"}).status_code == 200


def test_only_this_browsers_rows_and_those_of_removed_watches_too(client):
    device, _ = device_with_cookie(client)
    mine = row(WatchFactory(device=device, removed_at=NOW), Status.DROPPED, Reason.WATCH_REMOVED)
    theirs = row(WatchFactory(device=DeviceFactory()), Status.DROPPED, Reason.OUT_OF_STOCK)
    entries = client.get("/notifications/").context["entries"]
    assert [e.row.pk for e in entries] == [mine.pk]
    assert theirs.pk not in [e.row.pk for e in Client().get("/notifications/").context["entries"]]


def test_a_browser_with_nothing_sees_an_empty_page(client):
    response = client.get("/notifications/")
    assert response.status_code == 200
    assert "Nothing yet." in response.content.decode()


def test_names_and_messages_are_escaped(client):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=ListingFactory(name="<script>alert(1)</script>"))
    row(
        watch,
        Status.SENT,
        Reason.DELIVERED,
        message={"price": "<b>", "body": "<img src=x onerror=alert(2)>"},
    )
    body = client.get("/notifications/").content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;alert(1)" in body
    assert "<img src=x" not in body and "&lt;img src=x" in body


def test_history_query_count_does_not_grow_with_rows(client, django_assert_max_num_queries):
    device, _ = device_with_cookie(client)
    statuses = [
        (Status.SENT, Reason.DELIVERED),
        (Status.DROPPED, Reason.CONDITION_LOST),
        (Status.FAILED, Reason.DELIVER_NETWORK),
        (Status.RETRY, Reason.REFETCH_SERVER),
        (Status.PENDING, ""),
    ]
    for i in range(50):
        status, reason = statuses[i % len(statuses)]
        row(
            WatchFactory(device=device),
            status,
            reason,
            age=dt.timedelta(minutes=i),
            message={"price": 900},
        )
    # device, count, page (rows with watch and listing joined), the held-back rows'
    # re-checked prices, and on the first page the watches' missed detections
    with django_assert_max_num_queries(6):
        response = client.get("/notifications/")
    assert len(response.context["entries"]) == 20
    with django_assert_max_num_queries(5):
        assert len(client.get("/notifications/", {"page": 3}).context["entries"]) == 10


def test_an_email_rows_delivery_hold_ups_speak_of_the_mail_server_not_push():
    for reason in (Reason.DELIVER_NETWORK, Reason.DELIVER_SERVER):
        words = explain.explain(reason, Status.RETRY, "email")
        assert "mail server" in words and "push" not in words
        assert "mail server" in explain.explain(reason, Status.FAILED, "email")
    assert "mail server" in explain.explain(Reason.DELIVER_REJECTED, Status.FAILED, "email")
    assert "push service" in explain.explain(Reason.DELIVER_SERVER, Status.RETRY, "webpush")
