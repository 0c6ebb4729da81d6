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
newest detection and drops the older ones `superseded` — also when the newest waits for its
retry, not yet due: it goes out then, and the older one told first would be the same news
twice.

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
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction

from outbox.models import Outbox, Reason, Status
from outbox.queue import Candidate, DueRow, select_due, select_due_siblings, select_expired
from outbox.retries import backoff, used_every_retry
from outbox.transitions import Outcome, transition, transition_each


def new_holder() -> str:
    """A per-cycle claim token: which host and process, and a random part so two cycles of
    the same process never share one."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class Claim:
    """What one claim did: the rows it now holds, how many due rows it looked at (fewer than
    asked for, none `left`: the queue is empty) and how many older rows it dropped
    `superseded`."""

    ids: list[int] = field(default_factory=list)
    selected: int = 0
    superseded: int = 0
    # Selected rows `keep` left due (for a later batch): the queue is not drained.
    left: int = 0


def claim_due(
    holder: str,
    limit: int,
    now: dt.datetime,
    keep: Callable[[list[Candidate]], list[Candidate]] | None = None,
) -> Claim:
    """Claim up to `limit` due rows, oldest first, for `holder` at `now` (the moment of the
    claim). Per watch and channel only the newest due detection is claimed — whichever
    dispatcher's batch its older rows fell into — and the older due rows end
    `dropped`/`superseded`, as do due rows behind a newer one already sent, in flight or
    waiting for its retry. A watch and channel another dispatcher has in flight gets no
    second row in flight, even when both claimed at once (the in-flight index refuses ours:
    caught); its due rows older than the one in flight are superseded, a newer one waits
    for its turn. `keep`, given the
    rows selected, returns those to claim, in order (the rest stay due, counted in `left`);
    `selected` counts them all."""
    with transaction.atomic():
        selected = select_due(now, limit)
        claim = Claim(selected=len(selected))
        if keep is not None:
            kept = keep(selected)
            claim.left = len(selected) - len(kept)
            selected = kept
        if not selected:
            return claim
        backlogs = _backlogs(selected, now)
        claim.ids = _claim_newest(backlogs, holder, now)
        claim.superseded = _supersede_older(backlogs, set(claim.ids), holder, now)
    return claim


@dataclass
class _Backlog:
    """The due rows of one watch and channel, and the newest row already sent for them and
    the newest in flight."""

    due: list[DueRow] = field(default_factory=list)
    told: DueRow | None = None
    # The newest row another dispatcher holds when the siblings were read.
    flying: DueRow | None = None
    # The newest row waiting for its retry (`pending`/`retry`, not yet due).
    waiting: DueRow | None = None
    # The row the others give way to: the newest due one, or a row in flight, sent or
    # waiting for its retry that is at least as new (then none of `due` is claimed).
    newest: DueRow | None = None


def _backlogs(selected: list[Candidate], now: dt.datetime) -> dict[tuple[int, str], _Backlog]:
    """The selected rows by watch and channel, each with every other due row of them, the
    newest sent and the newest in flight — read only for watches that have a backlog
    (usually none has)."""
    backlogs: dict[tuple[int, str], _Backlog] = defaultdict(_Backlog)
    for candidate in selected:
        backlogs[candidate.row.key].due.append(candidate.row)
    wanted = {candidate.row.key for candidate in selected if candidate.backlog}
    selected_ids = {candidate.row.id for candidate in selected}
    if wanted:
        for sibling in select_due_siblings(now, sorted({watch for watch, _ in wanted})):
            row, backlog = sibling.row, backlogs.get(sibling.row.key)
            if backlog is None or row.key not in wanted:
                continue
            if sibling.status == Status.SENT:
                if backlog.told is None or row.order > backlog.told.order:
                    backlog.told = row
            elif sibling.status == Status.SENDING:
                if backlog.flying is None or row.order > backlog.flying.order:
                    backlog.flying = row
            elif not sibling.due:
                if backlog.waiting is None or row.order > backlog.waiting.order:
                    backlog.waiting = row
            elif row.id not in selected_ids:
                backlog.due.append(row)
    for backlog in backlogs.values():
        newest = max(backlog.due, key=lambda row: row.order)
        # A newer detection already went out (another dispatcher sent it while these rows
        # were locked by a third), is going out (another dispatcher claimed it since our
        # select, and may have sent it before our UPDATE, which the in-flight index would
        # then let through), or will go out when its retry is due (its re-check judges the
        # newest news; the older row told first would be the same news twice): nothing of
        # this backlog is claimed, all of it superseded.
        for held in (backlog.told, backlog.flying, backlog.waiting):
            if held is not None and held.detected_at >= newest.detected_at:
                newest = held
        backlog.newest = newest
    return dict(backlogs)


def _claim_newest(
    backlogs: dict[tuple[int, str], _Backlog], holder: str, now: dt.datetime
) -> list[int]:
    """Claim each backlog's newest due row, in one UPDATE; when another dispatcher claimed a
    row of one of these watches since they were selected (the in-flight index refuses
    ours), watch by watch, leaving the ones it holds to it."""
    due = {
        key: backlog.newest
        for key, backlog in backlogs.items()
        if backlog.newest is not None and backlog.newest in backlog.due
    }
    try:
        with transaction.atomic():
            return _claim(sorted(row.id for row in due.values()), holder, now) if due else []
    except IntegrityError:
        claimed: list[int] = []
        for key, row in sorted(due.items()):
            try:
                with transaction.atomic():
                    claimed += _claim([row.id], holder, now)
            except IntegrityError:
                backlogs[key].newest = _in_flight(key) or row
        return claimed


def _supersede_older(
    backlogs: dict[tuple[int, str], _Backlog], claimed: set[int], holder: str, now: dt.datetime
) -> int:
    """Drop `superseded` every due row older than its backlog's newest. Older rows another
    dispatcher holds stay due: the next claim that sees them supersedes them (or the row
    that went out does). Returns how many were dropped."""
    older: dict[int, Outcome] = {}
    for backlog in backlogs.values():
        newest = backlog.newest
        assert newest is not None  # set for every backlog by `_backlogs`
        for row in backlog.due:
            if row.id == newest.id or row.id in claimed:
                continue
            if row.detected_at <= newest.detected_at:
                older[row.id] = Outcome(
                    Status.DROPPED,
                    Reason.SUPERSEDED,
                    f"row {newest.id} is a newer notification for the same watch",
                    {"superseded_by": newest.id},
                    {"claimed_by": ""},
                )
    return len(
        transition_each(
            older, expect=[Status.PENDING, Status.RETRY], actor=holder, now=now, skip_locked=True
        )
    )


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
    row = (
        Outbox.objects.filter(watch_id=key[0], channel=key[1], status=Status.SENDING)
        .values_list("id", "watch_id", "channel", "detected_at")
        .first()
    )
    return None if row is None else DueRow(*row)


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
