"""The fence of a claim is (claimed_by, attempts): a dispatcher whose lease expired can never
record an outcome over the one that took the row over — not even when the one that took it
over carries the same holder token (the same process, a later cycle)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from outbox.claims import claim_due, recover_expired_leases
from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from outbox.transitions import Fence, Outcome, transition
from tests.factories import ListingFactory, SubscribedDeviceFactory, WatchFactory
from tests.fakes.push_service import b64url
from tests.outbox_helpers import enqueue_for

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


def _row() -> Outbox:
    return enqueue_for(WatchFactory.create(listing=ListingFactory(price=900), target_price=950))


def _state(row: Outbox) -> tuple[str, str, int]:
    return Outbox.objects.filter(pk=row.pk).values_list("status", "claimed_by", "attempts").get()


@pytest.mark.django_db
def test_each_claim_gives_the_row_a_new_attempt_number():
    with time_machine.travel(NOW, tick=False) as clock:
        row = _row()
        claim_due("h", 10, timezone.now())
        assert _state(row) == (Status.SENDING, "h", 1)
        clock.shift(dt.timedelta(hours=1))
        recover_expired_leases(timezone.now())
        clock.shift(dt.timedelta(hours=1))
        claim_due("h", 10, timezone.now())
        assert _state(row) == (Status.SENDING, "h", 2)


@pytest.mark.django_db
def test_the_same_holder_reclaiming_later_fences_out_its_own_earlier_claim():
    with time_machine.travel(NOW, tick=False) as clock:
        row = _row()
        assert claim_due("host:42:same", 10, timezone.now()).ids == [row.pk]
        clock.shift(dt.timedelta(hours=1))
        assert recover_expired_leases(timezone.now()) == 1
        clock.shift(dt.timedelta(hours=1))
        assert claim_due("host:42:same", 10, timezone.now()).ids == [row.pk]

        # The first claim (attempt 1) wakes up: same holder token, but not its attempt.
        late = transition(
            [row.pk],
            Outcome(Status.SENT, Reason.DELIVERED),
            fence=Fence("host:42:same", {row.pk: 1}),
        )
        assert late == []
        assert _state(row) == (Status.SENDING, "host:42:same", 2)
        on_time = transition(
            [row.pk],
            Outcome(Status.SENT, Reason.DELIVERED),
            fence=Fence("host:42:same", {row.pk: 2}),
        )
        assert on_time == [row.pk]


@pytest.mark.django_db
def test_a_row_missing_from_the_fence_never_moves():
    row = _row()
    claim_due("h", 10, timezone.now())
    assert transition([row.pk], Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("h", {})) == []
    assert _state(row)[0] == Status.SENDING


@pytest.mark.django_db(transaction=True)
def test_a_cycle_whose_lease_expired_mid_delivery_cannot_record_over_the_later_cycle(
    push_service, settings
):
    """Cycle A claims the row and starts delivering; while its request hangs, the lease
    expires and cycle B — with the same holder token, as a caller passing its own holder
    would — recovers the row, re-claims it and starts delivering too. A's answer comes back
    first: its outcome is refused (the row is at B's attempt), and B records `sent`. The two
    deliveries carry the same Topic and tag, so the push service and the device collapse them."""
    settings.OUTBOX_LEASE_SECONDS = 300
    subscriber = push_service.new_subscriber()
    device = SubscribedDeviceFactory(
        push_endpoint=subscriber.endpoint,
        push_p256dh=subscriber.p256dh,
        push_auth=b64url(subscriber.auth),
    )
    watch = WatchFactory(device=device, listing=ListingFactory(price=900), target_price=950)
    row = enqueue_for(watch)
    b_delivering, a_recorded = threading.Event(), threading.Event()
    second: list = []

    def cycle_b() -> None:
        try:
            expired = timezone.now() + dt.timedelta(seconds=301)
            second.append(run_cycle(holder="host:1:same", now=expired))  # recovers: retry in 30 s
            later = expired + dt.timedelta(seconds=31)
            second.append(run_cycle(holder="host:1:same", now=later))
        finally:
            connection.close()

    b = threading.Thread(target=cycle_b)

    def lease_expires_and_b_takes_over() -> None:  # while A's request is in flight
        b.start()
        assert b_delivering.wait(20)

    def b_waits_for_a() -> None:  # while B's request is in flight
        b_delivering.set()
        assert a_recorded.wait(20)

    push_service.answer(201, before=lease_expires_and_b_takes_over)
    push_service.answer(201, before=b_waits_for_a)

    first = run_cycle(holder="host:1:same")
    a_recorded.set()
    b.join(20)

    assert (first.claimed, first.by_status[Status.SENT]) == (1, 0)
    assert second[0].recovered == 1
    assert (second[1].claimed, second[1].by_status[Status.SENT]) == (1, 1)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.retry_count) == (Status.SENT, 2, 1)
    story = list(row.events.order_by("id").values_list("to_status", "reason"))
    assert story == [
        (Status.SENDING, Reason.CLAIMED),
        (Status.RETRY, Reason.LEASE_EXPIRED),
        (Status.SENDING, Reason.CLAIMED),
        (Status.SENT, Reason.DELIVERED),
    ]
    deliveries = push_service.accepted()
    assert len(deliveries) == 2
    assert {(d.topic, d.tag) for d in deliveries} == {
        (f"w{watch.pk}-target_price", row.sent_message["tag"])
    }
