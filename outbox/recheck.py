"""The re-check: right before sending, does each claimed row still hold?

Steps 4 to 6 of a dispatch cycle, decided in memory (nothing here writes):
4. pre-guards drop rows whose watch was removed or paused, whose listing was paused, whose
   device no longer asks for the row's channel, or has no subscription (an e-mail row: no
   confirmed, working address) — without asking any marketplace;
5. each remaining row's listing was re-fetched once this cycle (`watches.services.refetch`);
   an error kind becomes a drop or a retry (`FETCH_OUTCOME`); a marketplace halted for a
   configuration fault holds the row, no retry counted, until its next probe (`WAITING`). A
   product watch's row is judged on its product's best offer in stock now
   (`watches.services.refetch_products`),
   whichever shop that is: no shop in stock is `out_of_stock`, the best one above the line
   `condition_lost` — unless a marketplace could not answer (it may hold the better offer,
   the very one detected perhaps): then its error decides, as above, one that waits (a
   halt) before a transient one;
6. the trigger is judged again on the fresh value (`watches.triggers.recheck`), as detection
   judged it — after points for a watch after points, the member-only points counted for a
   device that says it is a member: a campaign that ended since detection is `points_ended`;
   of two rows for the same watch and channel only the newest may go out, and the message is
   built from the fresh value, with its breakdown (price, shipping, points).
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import groupby
from types import MappingProxyType

from django.utils import translation

from outbox.channels.base import Message
from outbox.messages import build_message
from outbox.models import Outbox, Reason, Status
from watches.marketplaces.base import FetchError, FetchKind, FetchResult
from watches.models import Channel, Listing
from watches.services import ProductAnswer
from watches.triggers import Judgement, members_count, recheck

FETCH_OUTCOME: dict[FetchKind, tuple[Status, Reason]] = {
    FetchKind.EMPTY: (Status.DROPPED, Reason.OUT_OF_STOCK),
    FetchKind.NOT_FOUND: (Status.DROPPED, Reason.ITEM_NOT_FOUND),
    FetchKind.RATE_LIMITED: (Status.RETRY, Reason.REFETCH_RATE_LIMITED),
    FetchKind.NETWORK: (Status.RETRY, Reason.REFETCH_NETWORK),
    FetchKind.SERVER: (Status.RETRY, Reason.REFETCH_SERVER),
    FetchKind.BAD_RESPONSE: (Status.RETRY, Reason.REFETCH_BAD_RESPONSE),
    # The marketplace is halted until a person fixes its configuration: the row waits for it.
    FetchKind.CONFIG: (Status.RETRY, Reason.MARKETPLACE_HALTED),
}
# Retries that wait on something no retry can cure — our own shared limiter out of reach, a
# marketplace halted for its configuration — count none: such a row is never `failed` at the
# cap for having waited, however long the wait.
WAITING: frozenset[Reason] = frozenset({Reason.BUDGET_UNAVAILABLE, Reason.MARKETPLACE_HALTED})
# Of those, the ones due again exactly when the error says (`retry_after`: a halted
# marketplace's next probe), not after the row's backoff.
WAITING_UNTIL_SAID: frozenset[Reason] = frozenset({Reason.MARKETPLACE_HALTED})

_NO_ANSWER = FetchError(FetchKind.NETWORK, "no answer for this item")
_NO_SHOP = FetchError(FetchKind.EMPTY, "no shop has it in stock")
_NONE: Mapping[int, ProductAnswer] = MappingProxyType({})


@dataclass
class Decision:
    """Where one claimed row goes, decided in memory and written later in bulk. A row to be
    sent carries its message and the value it tells (the watch's next baseline)."""

    to: Status
    reason: Reason
    detail: str = ""
    data: dict | None = None
    retry_after: float | None = None
    message: Message | None = None
    value: Decimal | None = None
    # When the failure or the delivery was answered: what `sent_at` and backoff count from.
    answered_at: dt.datetime | None = None
    # The digest the row was delivered in (`outbox.digests.membership`), or None.
    digest: dict | None = None
    # A retry that does not count toward OUTBOX_MAX_RETRY (our own outage, not the shop's
    # or the channel's): the row keeps its retry count and waits its current backoff.
    counted: bool = True
    # A retry due again exactly this many seconds after it was answered, instead of after its
    # backoff: a halted marketplace's next probe (`WAITING_UNTIL_SAID`).
    due_in: float | None = None
    # A row to be sent whose message tells a points campaign's points: when that campaign
    # ends. The send gate hands it over only before then (`outbox.delivery.Freshness`).
    good_until: dt.datetime | None = None


def guard(row: Outbox) -> Reason | None:
    """Why `row` cannot go out whatever the price says, or None."""
    watch, device = row.watch, row.device
    if watch.removed_at is not None:
        return Reason.WATCH_REMOVED
    if watch.paused:
        return Reason.WATCH_PAUSED
    # A product watch's listing is only its last best offer: other shops' may still hold.
    if not watch.product_id and watch.listing.paused:
        return Reason.LISTING_PAUSED
    # The choice as it is now, not as it was at detection: a row held overnight for quiet
    # hours must not reach a channel switched off in the evening. The next poll puts what
    # still holds on the channels chosen now (the watch's baseline did not move).
    if not device.chooses(row.channel):
        return Reason.CHANNEL_OFF
    if row.channel == Channel.WEBPUSH and not device.can_receive:
        return Reason.NO_SUBSCRIPTION
    if row.channel == Channel.EMAIL and not device.email_active:
        return Reason.NO_EMAIL
    return None


def decide(
    live: list[Outbox],
    fetched: Mapping[int, FetchResult],
    offers: Mapping[int, ProductAnswer] = _NONE,
) -> dict[int, Decision]:
    """A decision for every row of `live` (rows that passed the guards), from the fresh
    answer for its listing (`fetched`, by listing id) or, for a product watch, the fresh
    offers of its product (`offers`, by product id)."""
    decisions: dict[int, Decision] = {}
    seen: set[tuple[int, str]] = set()
    # Newest first within each device language: a language is activated once per batch,
    # not once per message (two context-variable writes each time). The order that matters
    # — which of a watch's rows on a channel goes out — is kept: a watch's rows share a
    # device, so a language.
    ordered = sorted(live, key=lambda r: (r.device.language, r.detected_at), reverse=True)
    for language, rows in groupby(ordered, key=lambda r: r.device.language):
        with translation.override(language):
            for row in rows:
                decisions[row.id] = _decide(row, fetched, offers, seen, language)
    return decisions


def _decide(
    row: Outbox,
    fetched: Mapping[int, FetchResult],
    offers: Mapping[int, ProductAnswer],
    seen: set[tuple[int, str]],
    language: str,
) -> Decision:
    listing, result, unanswered = _fresh(row, fetched, offers)
    if isinstance(result, FetchError):
        return _failed(result)
    watch = row.watch
    judgement = recheck(
        watch,
        listing.units_per_pack,
        result,
        row.detected_payload,
        row.detected_at,
        members=row.device.lyp_premium,
    )
    facts = {
        "fresh": result.as_json(),
        "value": _str(judgement.value),
        "line": _str(judgement.line),
    }
    key = (row.watch_id, row.channel)
    if not judgement.holds and unanswered is not None:
        # Not on the offers answered, but a marketplace that could not answer may hold a
        # cheaper one (the very offer detected, perhaps): ask again rather than drop.
        return _failed(unanswered)
    if judgement.holds and key in seen:
        judgement = Judgement(False, Reason.ALREADY_NOTIFIED, judgement.value, judgement.line)
    if not judgement.holds:
        return Decision(Status.DROPPED, Reason(judgement.reason), data=facts)
    seen.add(key)
    message = build_message(row, watch, listing, result, judgement, language)
    facts["message"] = message.as_json()
    return Decision(
        Status.SENT,
        Reason.DELIVERED,
        data=facts,
        message=message,
        value=judgement.value,
        good_until=result.points_until,
    )


def _failed(error: FetchError) -> Decision:
    """Where a row goes when the answer it needs is `error`."""
    to, reason = FETCH_OUTCOME[error.kind]
    if error.ours:
        # Nobody asked the shop: our shared limiter was out. The row waits for it, as long
        # as it takes, and is judged on a fresh answer once it is back.
        to, reason = Status.RETRY, Reason.BUDGET_UNAVAILABLE
    return Decision(
        to,
        reason,
        error.detail,
        {"fetch_error": error.kind.value, "detail": error.detail},
        retry_after=error.retry_after,
        counted=reason not in WAITING,
        due_in=error.retry_after if reason in WAITING_UNTIL_SAID else None,
    )


def _fresh(
    row: Outbox, fetched: Mapping[int, FetchResult], offers: Mapping[int, ProductAnswer]
) -> tuple[Listing, FetchResult, FetchError | None]:
    """The listing a row is judged on and its fresh answer: a listing watch's own listing;
    for a product watch, the best offer in stock now, of whichever shop — and the error of a
    marketplace that could not say whether it has a better one (None: every one answered)."""
    watch = row.watch
    if not watch.product_id:
        return watch.listing, fetched.get(watch.listing_id) or _NO_ANSWER, None
    answer = offers.get(watch.product_id)
    if answer is None:
        return watch.listing, _NO_ANSWER, None
    failed = [error for error in answer.errors if error.kind != FetchKind.EMPTY]
    # One that waits on what no retry cures (a halted marketplace, our limiter) before a
    # transient one: a row held for a halt is never `failed` for another's 5xx meanwhile.
    unanswered = min(failed, key=lambda error: not _waits(error), default=None)
    best = answer.best(
        after_points=watch.after_points,
        members=members_count(watch, row.device.lyp_premium),
    )
    if best is not None:
        offer, result = best
        # Judged and told per the product's pack, as detection judged it: a copy, so the
        # offer as stored keeps what its own page says.
        offer = copy.copy(offer)
        offer.units_per_pack, offer.unit_label = answer.units_per_pack, answer.unit_label
        return offer, result, unanswered
    if unanswered is not None:
        return watch.listing, unanswered, unanswered
    return watch.listing, _NO_SHOP, None


def _waits(error: FetchError) -> bool:
    return error.ours or FETCH_OUTCOME[error.kind][1] in WAITING


def _str(value) -> str | None:
    return None if value is None else str(value)
