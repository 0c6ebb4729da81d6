"""Outbox rows brought to a given state the way production does it: enqueued by `enqueue`,
then moved by `transition`, so they carry the same columns and events a real row would."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from outbox.enqueue import enqueue
from outbox.models import Outbox, Reason, Status
from outbox.transitions import Outcome, transition
from tests.factories import WatchFactory

# status -> the moves that reach it from pending, with the reason of each
PATHS: dict[Status, list[tuple[Status, Reason]]] = {
    Status.PENDING: [],
    Status.SENDING: [(Status.SENDING, Reason.CLAIMED)],
    Status.RETRY: [(Status.SENDING, Reason.CLAIMED), (Status.RETRY, Reason.REFETCH_NETWORK)],
    Status.FAILED: [(Status.SENDING, Reason.CLAIMED), (Status.FAILED, Reason.DELIVER_SERVER)],
    Status.SENT: [(Status.SENDING, Reason.CLAIMED), (Status.SENT, Reason.DELIVERED)],
    Status.DROPPED: [(Status.DROPPED, Reason.CONDITION_LOST)],
}


def row_in(
    status: Status,
    *,
    reason: Reason | None = None,
    retry_count: int = 0,
    watch=None,
    now: dt.datetime | None = None,
) -> Outbox:
    """A fresh row in `status`. `reason` overrides the last move's reason."""
    now = now or timezone.now()
    watch = watch or WatchFactory()
    assert enqueue(watch, now, {"price": 980, "shipping": 0, "in_stock": True})
    row = Outbox.objects.filter(watch=watch).latest("id")
    path = PATHS[status]
    for i, (to, default_reason) in enumerate(path):
        last = i == len(path) - 1
        fields: dict = {}
        if to == Status.SENDING:
            fields = {"claimed_by": "test-holder", "claimed_at": now}
        elif to == Status.RETRY:
            fields = {
                "retry_count": retry_count or 1,
                "next_attempt_at": now + dt.timedelta(minutes=5),
            }
        elif to == Status.FAILED:
            fields = {"retry_count": retry_count or 8}
        elif to == Status.SENT:
            fields = {"sent_at": now, "sent_message": {"title": "¥980", "body": "now"}}
        data = {"fresh": {"price": 980}, "value": "980", "line": "1200"} if last else None
        moved = transition(
            [row.pk],
            Outcome(to, reason if last and reason else default_reason, data=data, values=fields),
            now=now,
        )
        assert moved == [row.pk]
    row.refresh_from_db()
    return row
