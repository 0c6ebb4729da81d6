"""Step 7 of a dispatch cycle: deliver the messages that still hold, concurrently, with no
database access and no transaction open; a channel's failure becomes an outcome
(`DELIVERY_OUTCOME`), never an exception that stops the cycle."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from common.counters import delivery_timer
from outbox.channels.base import DeliveryError, DeliveryKind, Message, get_channel
from outbox.clock import Clock
from outbox.models import Outbox, Reason, Status

if TYPE_CHECKING:
    from outbox.lease import Lease

log = logging.getLogger("outbox.dispatch")

DELIVERY_OUTCOME: dict[DeliveryKind, tuple[Status, Reason]] = {
    DeliveryKind.RATE_LIMITED: (Status.RETRY, Reason.DELIVER_RATE_LIMITED),
    DeliveryKind.NETWORK: (Status.RETRY, Reason.DELIVER_NETWORK),
    DeliveryKind.SERVER: (Status.RETRY, Reason.DELIVER_SERVER),
    DeliveryKind.GONE: (Status.DROPPED, Reason.SUBSCRIPTION_GONE),
    DeliveryKind.REJECTED: (Status.FAILED, Reason.DELIVER_REJECTED),
    DeliveryKind.BOUNCED: (Status.DROPPED, Reason.RECIPIENT_REFUSED),
    DeliveryKind.EXPIRED: (Status.RETRY, Reason.FRESH_VALUE_EXPIRED),
}


@dataclass(frozen=True)
class Delivery:
    """What became of one message: delivered (with the facts the channel reported, kept in
    the sent event), or the error; `answered_at`, when the channel answered (None: never
    asked), is the time `sent_at` and a retry's backoff count from; `gated_at`, when the send
    gate let it start or held it back (None: it never came up), what the value's age is
    counted at."""

    facts: Mapping[str, Any] | None = None
    error: DeliveryError | None = None
    answered_at: dt.datetime | None = None
    gated_at: dt.datetime | None = None


# A message whose thread died before it finished counts as not delivered: retried.
_UNFINISHED = Delivery(
    error=DeliveryError(DeliveryKind.NETWORK, "the delivery thread stopped early")
)


# The send gate refused: the row is no longer held, or too little of its lease is left.
_GATED = Delivery(
    error=DeliveryError(
        DeliveryKind.NETWORK, "not started: the dispatcher's lease on the row ran short"
    )
)


def deliver_all(
    items: list[tuple[Outbox, Message]],
    clock: Clock,
    lease: Lease | None,
    fresh: Freshness,
) -> list[tuple[Outbox, Delivery]]:
    """Deliver concurrently with a bounded pool: delivery waits on the network, not the CPU.
    At most OUTBOX_DELIVERY_WORKERS threads each take the next message until none is left
    (cheaper than a future per message, and a slow answer holds up only its own thread).
    The threads never touch the database; a delivery starts only while `lease` (renewed by
    its own heartbeat) allows it, and while the value each of its rows tells — fetched at
    `fresh.at[row id]` — is at most OUTBOX_REFETCH_MAX_AGE old, and its points have not
    ended (`Freshness`)."""
    gate = _Gate(clock, lease, fresh)
    workers = min(settings.OUTBOX_DELIVERY_WORKERS, len(items))
    if workers <= 1:
        return [(row, gate.deliver(row, message)) for row, message in items]
    results: list[Delivery] = [_UNFINISHED] * len(items)
    queue = iter(enumerate(items))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            index, (row, message) = item
            results[index] = gate.deliver(row, message)

    threads = [
        threading.Thread(target=work, name=f"outbox-deliver-{n}", daemon=True)
        for n in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return list(zip((row for row, _ in items), results, strict=True))


@dataclass
class Freshness:
    """What the send gate reads of each row's value: when it was fetched (`at`), and, for a
    value that stops holding at a known moment — the points of a campaign that ends — that
    moment (`until`)."""

    at: dict[int, dt.datetime] = field(default_factory=dict)
    until: dict[int, dt.datetime] = field(default_factory=dict)

    def stale(self, rows: Iterable[int], now: dt.datetime, max_age: dt.timedelta) -> str:
        """Why the values of `rows` may not be handed over at `now` ("" when they may)."""
        rows = list(rows)
        oldest = now - min(self.at[pk] for pk in rows)
        if oldest > max_age:
            return (
                f"the price it tells was {oldest.total_seconds():.1f} s old "
                f"(OUTBOX_REFETCH_MAX_AGE {max_age.total_seconds():g} s)"
            )
        ended = [self.until[pk] for pk in rows if pk in self.until and self.until[pk] <= now]
        if ended:
            return f"the points it tells ended at {min(ended).isoformat()}"
        return ""


class _Gate:
    """The send gate, asked right before each delivery (a digest is one message: it starts
    only if every row it tells may). The value's age is checked here, not once before the
    batch's deliveries: a slow delivery ahead of it, or slow re-fetches of other listings
    before the first, can take longer than the bound."""

    def __init__(self, clock: Clock, lease: Lease | None, fresh: Freshness):
        # `clock` stamps the channels' answers (`sent_at`, a retry's backoff).
        self.clock, self.lease, self.fresh = clock, lease, fresh
        self.max_age = dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE)

    def deliver(self, row: Outbox, message: Message) -> Delivery:
        rows = message.rows or (row.pk,)
        if self.lease is not None and not all(self.lease.may_start(pk) for pk in rows):
            return _GATED
        # On the system clock, as the values were stamped (an adapter stamps its answers
        # with it; `dispatch._answered_at`): a test's pinned cycle clock may lead it.
        now = timezone.now()
        why = self.fresh.stale(rows, now, self.max_age)
        if why:
            error = DeliveryError(DeliveryKind.EXPIRED, f"not started: {why}")
            return Delivery(error=error, gated_at=now)
        return deliver_one(row, message, self.clock, gated_at=now)


def deliver_one(
    row: Outbox, message: Message, clock: Clock, gated_at: dt.datetime | None = None
) -> Delivery:
    try:
        with delivery_timer(row.channel):
            facts = get_channel(row.channel).deliver(row, message)
    except DeliveryError as error:
        return Delivery(error=error, answered_at=clock(), gated_at=gated_at)
    except Exception as exc:  # a bug in a channel: retry until the cap, then failed
        log.exception("channel %s failed on row %s", row.channel, row.pk)
        return Delivery(
            error=DeliveryError(DeliveryKind.SERVER, f"unexpected {type(exc).__name__}: {exc}"),
            answered_at=clock(),
            gated_at=gated_at,
        )
    return Delivery(facts=facts, answered_at=clock(), gated_at=gated_at)
