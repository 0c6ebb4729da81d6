"""Staff levers on the outbox: requeue, drop, retry now, and the drop when a listing is paused.

Each lever is a move of the state machine (`outbox.transitions.transition`: one conditional
UPDATE per chunk, an OutboxEvent per moved row, the staff user as `actor`), so a lever can
never race the dispatcher into a state the machine does not have: a row the dispatcher took
in the meantime is simply not moved, and is reported as skipped. No lever can move a `sent`
row: `sent` is not a from-status of any transition in `ALLOWED`.

The admin actions are thin wrappers of these functions; each returns a `LeverResult` that
says how many rows moved and why the others did not.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from outbox.models import Outbox, Reason, Status
from outbox.transitions import ALLOWED, Outcome, transition, transition_each

# Rows per transaction: a big selection (say 50,000 failed rows after a push-service outage)
# is moved in short transactions, so the dispatcher is never locked out for long.
BATCH = 2_000

REQUEUE_FROM = (Status.FAILED, Status.RETRY)
DROP_FROM = (Status.PENDING, Status.RETRY)
RETRY_NOW_FROM = (Status.RETRY,)

# `sent` is final: a lever that could move it would be a bug in ALLOWED.
assert all(Status.SENT not in froms for froms in ALLOWED.values())


@dataclass
class LeverResult:
    """What a lever did: `done` rows moved; `skipped` rows by the status that kept them."""

    lever: str  # a key of LEVER_TEXTS
    allowed_from: tuple[Status, ...]
    done: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def message(self) -> str:
        """`3 requeued; 2 skipped because they are sent (1) or pending (1) — only failed or
        retrying rows can be requeued.` — in the staff user's language."""
        done, only = LEVER_TEXTS[self.lever]
        text = done % {"count": self.done}
        if self.skipped_total:
            because = gettext(" or ").join(
                f"{Status(status).label.lower()} ({n})"
                for status, n in sorted(self.skipped.items())
            )
            allowed = gettext(" or ").join(Status(s).label.lower() for s in self.allowed_from)
            text += gettext("; %(count)s skipped because they are %(statuses)s — %(only)s") % {
                "count": self.skipped_total,
                "statuses": because,
                "only": only % {"statuses": allowed},
            }
        return text + gettext(".")

    def __str__(self) -> str:
        return self.message()


# What each lever says: (rows moved, which rows it may move).
LEVER_TEXTS = {
    "requeue": (_("%(count)s requeued"), _("only %(statuses)s rows can be requeued")),
    "drop": (_("%(count)s dropped"), _("only %(statuses)s rows can be dropped")),
    "retry_now": (_("%(count)s made due now"), _("only %(statuses)s rows can be made due now")),
}


def requeue(
    rows: QuerySet[Outbox], *, actor: str, now: dt.datetime | None = None, batch: int = BATCH
) -> LeverResult:
    """Failed or retrying rows → pending, due now, with their full retries again.

    `retry_count` goes back to 0 (a requeued row deserves the whole backoff ladder, else a
    failed row would fail again on its first hiccup); the count it had is kept in the event's
    data as `retry_count`, with the reason it was in (`previous_reason`)."""
    now = now or timezone.now()

    def move(ids: list[int]) -> list[int]:
        before = _lock(ids, REQUEUE_FROM).values_list("id", "retry_count", "reason")
        values = {"next_attempt_at": now, "retry_count": 0, "claimed_by": ""}
        return transition_each(
            {
                row_id: Outcome(
                    Status.PENDING,
                    Reason.REQUEUED,
                    "requeued by staff",
                    data={"retry_count": count, "previous_reason": reason},
                    values=values,
                )
                for row_id, count, reason in before
            },
            expect=REQUEUE_FROM,
            actor=actor,
            now=now,
        )

    return _apply(rows, REQUEUE_FROM, "requeue", move, batch)


def drop(
    rows: QuerySet[Outbox], *, actor: str, now: dt.datetime | None = None, batch: int = BATCH
) -> LeverResult:
    """Pending or retrying rows → dropped (`manual`). A row being sent right now is left to
    its dispatcher: dropping it behind the dispatcher's back could record `dropped` for a
    message that was in fact delivered."""
    now = now or timezone.now()

    def move(ids: list[int]) -> list[int]:
        return transition(
            ids,
            Outcome(Status.DROPPED, Reason.MANUAL, "dropped by staff", values={"claimed_by": ""}),
            expect=DROP_FROM,
            actor=actor,
            now=now,
        )

    return _apply(rows, DROP_FROM, "drop", move, batch)


def retry_now(
    rows: QuerySet[Outbox], *, actor: str, now: dt.datetime | None = None, batch: int = BATCH
) -> LeverResult:
    """Retrying rows → due now (retry → retry). The row keeps its failure reason, so the
    overview still says why it is retrying; the event records that staff pushed it."""
    now = now or timezone.now()

    def move(ids: list[int]) -> list[int]:
        before = _lock(ids, RETRY_NOW_FROM).values_list("id", "reason")
        return transition_each(
            {
                # The row keeps its own reason; the event says staff pushed it.
                row_id: Outcome(
                    Status.RETRY,
                    Reason.REQUEUED,
                    "retry now (staff)",
                    values={"next_attempt_at": now, "reason": reason},
                )
                for row_id, reason in before
            },
            expect=RETRY_NOW_FROM,
            actor=actor,
            now=now,
        )

    return _apply(rows, RETRY_NOW_FROM, "retry_now", move, batch)


def drop_for_paused_listings(
    sender: object,
    *,
    listing_ids: Iterable[int],
    actor: str,
    now: dt.datetime | None = None,
    batch: int = BATCH,
    **kwargs: object,
) -> LeverResult:
    """Receiver of `watches.services.listings_paused`: drop the pending and retrying rows of
    the paused listings' watches with reason `listing_paused`, at once rather than when the
    dispatcher reaches them, with the staff user's name on each event. A product watch's rows
    stay: its listing is only its last best offer, and the re-check judges the product's
    other shops (a paused offer is not asked)."""
    now = now or timezone.now()
    listing_ids = list(listing_ids)

    def move(ids: list[int]) -> list[int]:
        return transition(
            ids,
            Outcome(
                Status.DROPPED,
                Reason.LISTING_PAUSED,
                "listing paused by staff",
                values={"claimed_by": ""},
            ),
            expect=DROP_FROM,
            actor=actor,
            now=now,
        )

    # Rows in flight are looked at too, so the report says they were left to their
    # dispatcher; finished rows are not news.
    rows = Outbox.objects.filter(
        watch__listing_id__in=listing_ids,
        watch__product__isnull=True,
        status__in=[*DROP_FROM, Status.SENDING],
    )
    return _apply(rows, DROP_FROM, "drop", move, batch)


def _apply(
    rows: QuerySet[Outbox],
    allowed: tuple[Status, ...],
    lever: str,
    move: Callable[[list[int]], list[int]],
    batch: int = BATCH,
) -> LeverResult:
    """Count the rows the lever may not touch, then move the others in batches, walking the
    ids upwards so a huge selection never sits in memory at once. A row that was eligible
    when read but moved by the dispatcher before our UPDATE is reported under its new status."""
    result = LeverResult(lever=lever, allowed_from=allowed)
    rows = rows.order_by()
    for row in rows.exclude(status__in=allowed).values("status").annotate(n=Count("id")):
        result.skipped[row["status"]] += row["n"]
    eligible = rows.filter(status__in=allowed).order_by("id").values_list("id", flat=True)
    last = 0
    while True:
        ids = list(eligible.filter(id__gt=last)[:batch])
        if not ids:
            break
        last = ids[-1]
        with transaction.atomic():
            won = set(move(ids))
        result.done += len(won)
        lost = [row_id for row_id in ids if row_id not in won]
        if lost:
            for status in Outbox.objects.filter(id__in=lost).values_list("status", flat=True):
                result.skipped[status] += 1
    return result


def _lock(ids: list[int], statuses: tuple[Status, ...]) -> QuerySet[Outbox]:
    """The rows still in `statuses`, read under a row lock on PostgreSQL so what the event
    records (the old retry count, the old reason) is what the UPDATE then overwrites. SQLite
    needs no lock: the transaction (BEGIN IMMEDIATE) already holds the database's write lock."""
    rows = Outbox.objects.filter(id__in=ids, status__in=statuses).order_by("id")
    if connection.features.has_select_for_update:
        rows = rows.select_for_update()
    return rows
