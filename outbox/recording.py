"""The last step of a dispatch cycle: write every decision of a batch, fenced by the claim.

All of a batch's rows move in one transaction (`transition_each`: one conditional UPDATE
per status and reason), each only while it still carries the holder token and attempt number
it was claimed with; a row another dispatcher took over in the meantime is left to it. What
the moves mean for the domain is asked of `watches.services` in the same transaction: a
delivered notification moves its watch's baseline, a gone subscription is deactivated.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal

from django.db import transaction

from outbox.clock import Clock
from outbox.delivery import DELIVERY_OUTCOME, Delivery
from outbox.models import Outbox, Reason, Status
from outbox.recheck import Decision
from outbox.retries import backoff, used_every_retry
from outbox.transitions import Fence, Outcome, transition_each
from watches import services

log = logging.getLogger("outbox.dispatch")


def apply_delivery(decision: Decision, delivery: Delivery) -> None:
    """Fold what the channel said into a `sent` decision: its facts into the event, or its
    error's outcome (`DELIVERY_OUTCOME`) instead of `sent`."""
    decision.answered_at = delivery.answered_at
    if decision.digest is not None:
        decision.data = {**(decision.data or {}), "digest": decision.digest}
    if delivery.error is None:
        if delivery.facts:
            decision.data = {**(decision.data or {}), "delivery": dict(delivery.facts)}
        return
    error = delivery.error
    decision.to, decision.reason = DELIVERY_OUTCOME[error.kind]
    decision.retry_after, decision.detail = error.retry_after, error.message
    decision.data = {
        **(decision.data or {}),
        "delivery_error": error.kind.value,
        "status_code": error.status_code,
    }
    if error.maybe_delivered:
        # As an expired lease after the delivery started (`claims.recover_expired_leases`),
        # `_outcome` marks the row: its next attempt goes out in this one's form.
        decision.data["may_have_been_delivered"] = True


def record(
    rows: list[Outbox], decisions: Mapping[int, Decision], holder: str, clock: Clock
) -> Counter[Status]:
    """Write the decisions of a batch's `rows` claimed by `holder`. Returns how many rows
    went to each status (a retry at the cap counts as failed). `sent_at` and a retry's
    backoff count from when each answer came (`Decision.answered_at`); the rest is stamped
    now."""
    now = clock()
    by_row = {row.id: row for row in rows}
    outcomes = {
        row_id: _outcome(by_row[row_id], decision, now) for row_id, decision in decisions.items()
    }
    fence = Fence(holder, {row_id: by_row[row_id].attempts for row_id in outcomes})
    with transaction.atomic():
        won = transition_each(outcomes, expect=[Status.SENDING], fence=fence, actor=holder, now=now)
        if len(won) < len(outcomes):
            log.warning(
                "%d row(s) were taken over before %s could record them",
                len(outcomes) - len(won),
                holder,
            )
        # The baseline moves when the delivery is recorded (one write for the batch); the
        # row's own `sent_at` is when the channel answered. Of a watch's rows sent in one
        # batch (its channels), the latest detection's is the baseline.
        baselines: dict[int, tuple[Decimal | None, dt.datetime]] = {}
        for row_id in won:
            if outcomes[row_id].to != Status.SENT:
                continue
            row = by_row[row_id]
            told = baselines.get(row.watch_id)
            if told is None or row.detected_at > told[1]:
                baselines[row.watch_id] = (decisions[row_id].value, row.detected_at)
        services.advance_baselines(baselines, now)
        services.deactivate_gone_subscriptions(
            (by_row[row_id].device_id, by_row[row_id].device.push_endpoint)
            for row_id in won
            if outcomes[row_id].reason == Reason.SUBSCRIPTION_GONE
        )
        # The rows of a refused digest were one mail: record_bounces counts each (device,
        # address) pair once.
        services.record_bounces(
            (
                (by_row[row_id].device_id, by_row[row_id].device.email)
                for row_id in won
                if outcomes[row_id].reason == Reason.RECIPIENT_REFUSED
            ),
            now,
        )
    return Counter(outcomes[row_id].to for row_id in won)


def _outcome(row: Outbox, decision: Decision, now: dt.datetime) -> Outcome:
    now = decision.answered_at or now
    values: dict = {"claimed_by": ""}
    to = decision.to
    increment: tuple[str, ...] = ()
    if (decision.data or {}).get("may_have_been_delivered") is True:
        values["maybe_delivered"] = True  # never cleared (`Outbox.maybe_delivered`)
    if to == Status.RETRY and decision.counted and used_every_retry(row.retry_count):
        to = Status.FAILED  # the cap: this was the last try
    if to == Status.SENT:
        assert decision.message is not None  # a row is sent with its message (outbox.recheck)
        values["sent_at"] = now
        values["sent_message"] = decision.message.as_json()
        if decision.digest is not None:
            # The row's own item, and the digest it went out in (the history page says so).
            values["sent_message"]["digest"] = decision.digest
    elif to == Status.RETRY:
        if decision.counted:
            increment = ("retry_count",)
        if decision.due_in is not None:
            values["next_attempt_at"] = now + dt.timedelta(seconds=decision.due_in)
        else:
            values["next_attempt_at"] = now + backoff(row.retry_count, decision.retry_after)
    return Outcome(to, decision.reason, decision.detail, decision.data, values, increment)
