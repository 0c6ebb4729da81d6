"""The state machine: one conditional UPDATE per transition, an event per moved row."""

from __future__ import annotations

import pytest

from outbox.models import Outbox, OutboxEvent, Reason, Status
from outbox.transitions import (
    ALLOWED,
    Fence,
    Outcome,
    TransitionNotAllowed,
    transition,
    transition_each,
    transition_one,
)
from tests.factories import WatchFactory
from tests.outbox_helpers import enqueue_for

pytestmark = pytest.mark.django_db


def test_a_move_outside_the_machine_raises():
    row = enqueue_for(WatchFactory())
    with pytest.raises(TransitionNotAllowed):
        transition([row.pk], Outcome(Status.SENT), expect=[Status.PENDING])
    with pytest.raises(TransitionNotAllowed):
        transition([row.pk], Outcome(Status.PENDING), expect=[Status.SENT])


def test_a_sent_row_can_never_move():
    row = enqueue_for(WatchFactory())
    transition([row.pk], Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "me"}))
    transition([row.pk], Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("me"))
    for to in ALLOWED:
        with pytest.raises(TransitionNotAllowed):
            transition_one(row.pk, Outcome(to, Reason.MANUAL))
    assert not any(Status.SENT in sources for sources in ALLOWED.values())


def test_transition_one_is_false_when_another_process_got_there_first():
    row = enqueue_for(WatchFactory())
    transition([row.pk], Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "a"}))
    assert transition_one(row.pk, Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("b")) is False


def test_each_moved_row_gets_one_event_with_from_and_to():
    rows = [enqueue_for(WatchFactory()) for _ in range(3)]
    ids = [r.pk for r in rows]
    transition(ids[:1], Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "x"}))

    moved = transition(
        ids, Outcome(Status.DROPPED, Reason.MANUAL, detail="asked by the user"), actor="staff-ann"
    )

    assert sorted(moved) == sorted(ids)
    events = OutboxEvent.objects.filter(to_status=Status.DROPPED).order_by("outbox_id")
    assert [(e.outbox_id, e.from_status, e.reason, e.actor, e.detail) for e in events] == [
        (ids[0], "sending", "manual", "staff-ann", "asked by the user"),
        (ids[1], "pending", "manual", "staff-ann", "asked by the user"),
        (ids[2], "pending", "manual", "staff-ann", "asked by the user"),
    ]


def test_rows_not_in_an_allowed_status_are_left_alone():
    sent, pending = enqueue_for(WatchFactory()), enqueue_for(WatchFactory())
    transition([sent.pk], Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "h"}))
    transition([sent.pk], Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("h"))

    moved = transition([sent.pk, pending.pk], Outcome(Status.DROPPED, Reason.MANUAL))

    assert moved == [pending.pk]
    assert OutboxEvent.objects.filter(outbox=sent, to_status=Status.DROPPED).count() == 0


def test_per_row_values_reach_only_their_row():
    a, b = enqueue_for(WatchFactory()), enqueue_for(WatchFactory())
    transition_each(
        {
            a.pk: Outcome(
                Status.SENDING, Reason.CLAIMED, values={"claimed_by": "h", "attempts": 5}
            ),
            b.pk: Outcome(
                Status.SENDING, Reason.CLAIMED, values={"claimed_by": "h", "attempts": 7}
            ),
        }
    )
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.attempts, b.attempts) == (5, 7)


def test_increment_adds_one_to_each_rows_own_value():
    a, b = enqueue_for(WatchFactory()), enqueue_for(WatchFactory())
    Outbox.objects.filter(pk=b.pk).update(attempts=4)
    transition([a.pk, b.pk], Outcome(Status.SENDING, Reason.CLAIMED, increment=("attempts",)))
    assert dict(Outbox.objects.values_list("pk", "attempts")) == {a.pk: 1, b.pk: 5}


def test_one_per_row_value_shared_by_every_row_reaches_each():
    a, b = enqueue_for(WatchFactory()), enqueue_for(WatchFactory())
    transition_each(
        {
            a.pk: Outcome(Status.DROPPED, Reason.MANUAL, "same"),
            b.pk: Outcome(Status.DROPPED, Reason.MANUAL, "same"),
        }
    )
    assert set(Outbox.objects.values_list("detail", flat=True)) == {"same"}


def test_each_event_keeps_its_own_detail_and_data_and_no_data_stays_null():
    """Events of one move are written together (on PostgreSQL from one JSON document): each
    keeps its own detail and data — text that needs quoting, nested JSON, non-ASCII — and a
    move without data leaves the event's data NULL, not JSON null."""
    a, b, c = (enqueue_for(WatchFactory()) for _ in range(3))
    tricky = 'a "quoted", {braced} \\ back\\slashed, ¥900 「安い」'
    transition_each(
        {
            a.pk: Outcome(
                Status.DROPPED, Reason.MANUAL, detail=tricky, data={"n": [1, {"x": tricky}]}
            ),
            b.pk: Outcome(Status.DROPPED, Reason.MANUAL, detail="", data={"price": 900}),
            c.pk: Outcome(Status.DROPPED, Reason.MANUAL, detail="none"),
        }
    )
    events = {e.outbox_id: e for e in OutboxEvent.objects.filter(to_status=Status.DROPPED)}
    assert (events[a.pk].detail, events[a.pk].data) == (tricky, {"n": [1, {"x": tricky}]})
    assert (events[b.pk].detail, events[b.pk].data) == ("", {"price": 900})
    assert events[c.pk].data is None
    assert OutboxEvent.objects.filter(outbox_id=c.pk, data__isnull=True).exists()
