"""Claims and leases: which dispatcher holds which rows, and taking rows back from one that
died.

A claim moves due rows to `sending` in one conditional UPDATE per batch (`FOR UPDATE SKIP
LOCKED` on PostgreSQL), writing the cycle's holder token, the row's next attempt number and
`claimed_at` — the moment of this claim, read from the clock then, not at the start of the
cycle: together holder and attempt are the claim's fence (`outbox.transitions.Fence`),
without which no later move of the row is recorded. A claim is a lease of
OUTBOX_LEASE_SECONDS, renewed by its dispatcher while it works (`outbox.lease`): a row still
`sending` after that — its dispatcher died or hung — goes back to `retry`, or to `failed` at
the cap.

One notification per watch and channel may be in flight: the database refuses a second
`sending` row (a partial unique index). Of a watch's backlog of due rows, a claim takes the
newest detection and drops the older ones `superseded`.

A claim waits for no other transaction's row lock (on PostgreSQL): what it selects is
`SKIP LOCKED`, and what it claims or drops beyond that is locked lowest id first, skipping
what another holds (`outbox.transitions`) — a row another dispatcher has locked is that
dispatcher's to claim or drop, and one left due is seen by the next claim. Each of these
steps is one transaction, which the dispatcher runs again when the database ends it to
break a deadlock (`common.retrying`).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction

from outbox.models import Outbox, Reason, Status
from outbox.queue import DueRow, select_due, select_due_siblings, select_expired
from outbox.retries import backoff, used_every_retry
from outbox.transitions import Outcome, transition, transition_each


def new_holder() -> str:
    """A per-cycle claim token: which host and process, and a random part so two cycles of
    the same process never share one."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class Claim:
    """What one claim did: the rows it now holds, how many due rows it looked at (fewer than
    asked for: the queue is empty) and how many older rows it dropped `superseded`."""

    ids: list[int] = field(default_factory=list)
    selected: int = 0
    superseded: int = 0


def claim_due(holder: str, limit: int, now: dt.datetime) -> Claim:
    """Claim up to `limit` due rows, oldest first, for `holder` at `now` (the moment of the
    claim). Per watch and channel only the newest due detection is claimed — whichever
    dispatcher's batch its older rows fell into — and the older due rows end
    `dropped`/`superseded`, as do due rows behind a newer one already sent. A watch and
    channel another dispatcher has in flight is left alone, even when both claimed at once
    (the in-flight index refuses ours: caught)."""
    with transaction.atomic():
        selected = select_due(now, limit)
        claim = Claim(selected=len(selected))
        if not selected:
            return claim
        rows: dict[int, DueRow] = {row[0]: row[:4] for row in selected}
        told: dict[tuple[int, str], DueRow] = {}  # the newest sent row, per watch and channel
        # Only watches with a backlog need their other rows (usually none has one).
        wanted = {(row[1], row[2]) for row in selected if row[4]}
        if wanted:
            for sibling in select_due_siblings(now, sorted({watch for watch, _ in wanted})):
                row, was_sent = sibling[:4], sibling[4]
                key = (row[1], row[2])
                if key not in wanted:
                    continue
                if not was_sent:
                    rows[row[0]] = row
                elif key not in told or (row[3], row[0]) > (told[key][3], told[key][0]):
                    told[key] = row
        backlog: dict[tuple[int, str], list[DueRow]] = defaultdict(list)
        for row in rows.values():
            backlog[(row[1], row[2])].append(row)
        newest = {key: max(due, key=lambda r: (r[3], r[0])) for key, due in backlog.items()}
        # A newer detection already went out (another dispatcher sent it while these rows
        # were locked by a third): nothing of this backlog is claimed, all of it superseded.
        for key, sent in told.items():
            if key in newest and sent[3] >= newest[key][3]:
                newest[key] = sent
        to_claim = sorted(row[0] for row in newest.values() if row[0] in rows)
        try:
            with transaction.atomic():
                claim.ids = _claim(to_claim, holder, now) if to_claim else []
        except IntegrityError:
            # Another dispatcher claimed a row of one of these watches since we selected:
            # claim key by key, and leave the watches it holds to it.
            claim.ids = []
            for key, row in sorted(newest.items()):
                if row[0] not in rows:
                    continue  # already sent
                try:
                    with transaction.atomic():
                        claim.ids += _claim([row[0]], holder, now)
                except IntegrityError:
                    newest[key] = _in_flight(key) or row
        claimed = set(claim.ids)
        older = {
            row[0]: Outcome(
                Status.DROPPED,
                Reason.SUPERSEDED,
                f"row {newest[key][0]} is a newer notification for the same watch",
                {"superseded_by": newest[key][0]},
                {"claimed_by": ""},
            )
            for key, due in backlog.items()
            for row in due
            if row[0] != newest[key][0] and row[0] not in claimed and row[3] <= newest[key][3]
        }
        # Older rows another dispatcher holds stay due: the next claim that sees them
        # supersedes them (or the row that went out does).
        claim.superseded = len(
            transition_each(
                older,
                expect=[Status.PENDING, Status.RETRY],
                actor=holder,
                now=now,
                skip_locked=True,
            )
        )
    return claim


def _claim(ids: list[int], holder: str, now: dt.datetime) -> list[int]:
    return transition(
        ids,
        Outcome(
            Status.SENDING,
            Reason.CLAIMED,
            # The intent of the last attempt is cleared: this attempt has not started.
            values={"claimed_by": holder, "claimed_at": now, "attempt_started_at": None},
            # The claim's fence: a new holder token, and the row's next attempt number.
            increment=("attempts",),
        ),
        expect=[Status.PENDING, Status.RETRY],
        actor=holder,
        now=now,
        skip_locked=True,
    )


def _in_flight(key: tuple[int, str]) -> DueRow | None:
    """The row another dispatcher holds for this watch and channel (our older rows are
    superseded by it; a newer one of ours waits for its turn)."""
    return (
        Outbox.objects.filter(watch_id=key[0], channel=key[1], status=Status.SENDING)
        .values_list("id", "watch_id", "channel", "detected_at")
        .first()
    )


def recover_expired_leases(now: dt.datetime) -> int:
    """`sending` rows whose lease expired (their dispatcher died or hung) go back to `retry`,
    or to `failed` when they already used every retry. A row whose delivery had started is
    marked `maybe_delivered`: the message may have reached the person unrecorded. Returns how
    many were recovered."""
    cutoff = now - dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS)
    with transaction.atomic():
        outcomes: dict[int, Outcome] = {}
        values: dict[str, object]
        data: dict[str, object]
        for row_id, count, holder, started in select_expired(cutoff):
            to, values = Status.FAILED, {"claimed_by": ""}
            if not used_every_retry(count):
                to = Status.RETRY
                values.update(retry_count=count + 1, next_attempt_at=now + backoff(count))
            detail, data = f"lease of {holder} expired", {"holder": holder}
            if started is not None:
                detail += " after its delivery had started: the message may have been delivered"
                data["may_have_been_delivered"] = True
                values["maybe_delivered"] = True
            outcomes[row_id] = Outcome(to, Reason.LEASE_EXPIRED, detail, data, values)
        return len(transition_each(outcomes, expect=[Status.SENDING], now=now))
