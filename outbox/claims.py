"""Claims and leases: which dispatcher holds which rows, and taking rows back from one that
died.

A claim moves due rows to `sending` in one conditional UPDATE per batch (`FOR UPDATE SKIP
LOCKED` on PostgreSQL), writing the cycle's holder token and the row's next attempt number:
together they are the claim's fence (`outbox.transitions.Fence`), without which no later move
of the row is recorded. A claim is a lease of OUTBOX_LEASE_SECONDS: a row still `sending`
after that — its dispatcher died or hung — goes back to `retry`, or to `failed` at the cap.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid

from django.conf import settings
from django.db import transaction

from outbox.models import Reason, Status
from outbox.queue import select_due, select_expired
from outbox.retries import backoff, used_every_retry
from outbox.transitions import Outcome, transition, transition_each


def new_holder() -> str:
    """A per-cycle claim token: which host and process, and a random part so two cycles of
    the same process never share one."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def claim_due(holder: str, limit: int, now: dt.datetime) -> list[int]:
    """Claim up to `limit` due rows, oldest first, for `holder`. Returns the claimed ids."""
    with transaction.atomic():
        return transition(
            select_due(now, limit),
            Outcome(
                Status.SENDING,
                Reason.CLAIMED,
                values={"claimed_by": holder, "claimed_at": now},
                # The claim's fence: a new holder token, and the row's next attempt number.
                increment=("attempts",),
            ),
            actor=holder,
            now=now,
        )


def recover_expired_leases(now: dt.datetime) -> int:
    """`sending` rows whose lease expired (their dispatcher died or hung) go back to `retry`,
    or to `failed` when they already used every retry. Returns how many were recovered."""
    cutoff = now - dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS)
    with transaction.atomic():
        outcomes: dict[int, Outcome] = {}
        values: dict[str, object]
        for row_id, count, holder in select_expired(cutoff):
            to, values = Status.FAILED, {"claimed_by": ""}
            if not used_every_retry(count):
                to = Status.RETRY
                values.update(retry_count=count + 1, next_attempt_at=now + backoff(count))
            outcomes[row_id] = Outcome(
                to, Reason.LEASE_EXPIRED, f"lease of {holder} expired", {"holder": holder}, values
            )
        return len(transition_each(outcomes, expect=[Status.SENDING], now=now))
