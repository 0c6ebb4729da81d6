"""The dispatcher: one cycle re-checks what detection enqueued and sends only what still holds.

A cycle (run every minute by django-q2, or by `manage.py dispatch_outbox`):
1. recovers expired leases: `sending` rows older than the lease go back to `retry`
   (`lease_expired`), or `failed` at the cap (`outbox.claims`);
2. selects due rows from the `outbox_due` index — `status IN (pending, retry) AND
   next_attempt_at <= now`, oldest first — and
3. claims them atomically in batches (one conditional UPDATE per batch; `FOR UPDATE SKIP
   LOCKED` on PostgreSQL), so any number of dispatchers can run at once (`outbox.claims`);
4. drops rows whose watch was removed or paused, whose listing was paused, or whose device
   has no subscription (`outbox.recheck`), and holds rows whose device is in its quiet
   hours until the window ends (`outbox.holds`);
5. re-fetches each listing through `watches.services.refetch` — once per cycle while the
   answer is at most OUTBOX_REFETCH_MAX_AGE old, again (once per batch) when it is older; a
   poll's observation that fresh is the answer, without asking the marketplace again —
   which keeps the answer by the same rule as price polling (a history point or not, the
   listing's state, typical price and 90-day low); an error kind becomes a drop or a retry;
   a product watch's row re-fetches its product instead (`watches.services.refetch_products`:
   every shop's offer in one request per product, by the same freshness rule and the same
   observation rule) and is judged on the best offer in stock now, whichever shop it is;
6. re-judges the trigger on the fresh value (and drops `already_notified` when a later
   delivery moved the watch's baseline past this detection) and builds the message from it;
7. renews the batch's lease and records each delivery's intent (`outbox.lease`), groups
   the rows sendable to one device on one channel into one digest (`outbox.digests`; a row
   alone is sent as it is), delivers (`outbox.delivery`, a bounded thread pool, no
   transaction open, the lease renewed while it runs) and records, row by row, `sent`
   (moving the watch's `last_notified_*`), `retry` with backoff counted from the failure's
   answer, `failed` at the cap, or `dropped` (`outbox.recording`).

Times come from an injectable clock (`outbox.clock`), read at the moment they describe: a
claim's `claimed_at` when that batch is claimed, `sent_at` when the channel answered.

State changes are short transactions written in bulk; no network call happens inside one.
Every later transition of a claimed row is conditional on the claim's fence — the holder token
(`claimed_by`, new for every cycle) and the attempt number the claim gave the row (`attempts`)
— so a dispatcher that lost its lease cannot record over the one that took the row over.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from outbox import digests
from outbox.channels.base import DeliveryKind
from outbox.claims import claim_due, new_holder, recover_expired_leases
from outbox.clock import Clock, system_clock
from outbox.delivery import deliver_all
from outbox.holds import hold_quiet_rows
from outbox.lease import Lease
from outbox.models import DispatchRun, Outbox, Status
from outbox.recheck import Decision, decide, guard
from outbox.recording import apply_delivery, record
from watches import services
from watches.marketplaces.base import FetchResult, Observation
from watches.models import Device, Listing, Product

log = logging.getLogger("outbox.dispatch")

# What a cycle reports, and DispatchRun keeps, per final status.
REPORTED = (Status.SENT, Status.DROPPED, Status.RETRY, Status.FAILED)


@dataclass
class CycleResult:
    claimed: int = 0
    recovered: int = 0
    # How many claimed rows ended in each status this cycle.
    by_status: Counter[Status] = field(default_factory=Counter)

    def as_json(self) -> dict[str, int]:
        """`{"sent": n, "dropped": n, "retry": n, "failed": n, "recovered": n}`."""
        return {
            **{status.value: self.by_status[status] for status in REPORTED},
            "recovered": self.recovered,
        }


@dataclass
class _Cycle:
    holder: str
    clock: Clock
    result: CycleResult = field(default_factory=CycleResult)
    # listing id -> the latest re-fetch of this cycle, and when it was asked for
    fetched: dict[int, tuple[dt.datetime, FetchResult]] = field(default_factory=dict)
    # product id -> the latest re-fetch of its offers this cycle, and when it was asked for
    offers: dict[int, tuple[dt.datetime, services.ProductAnswer]] = field(default_factory=dict)
    # Rows whose delivery was held back for a reused value and that were made due again at
    # once (`_again_at_once`): at most once per row per cycle.
    again: set[int] = field(default_factory=set)


def run_cycle(
    *,
    limit: int | None = None,
    now: dt.datetime | None = None,
    holder: str | None = None,
    clock: Clock | None = None,
) -> CycleResult:
    """One dispatcher cycle over at most `limit` due rows (default: until nothing is due or
    OUTBOX_CYCLE_SECONDS have passed). Returns the outcome counts.

    Every time the cycle writes is read from `clock` (default: the system's) at the moment
    it describes. `now` pins the clock to one instant (for tests of what is due when)."""
    if clock is None:
        clock = system_clock if now is None else (lambda: now)
    started = timezone.now()
    cycle = _Cycle(holder=holder or new_holder(), clock=clock)
    result = cycle.result
    error = ""
    deadline = time.monotonic() + settings.OUTBOX_CYCLE_SECONDS
    try:
        _run(cycle, limit, deadline)
    except Exception as exc:
        # Rows already claimed stay `sending` until their lease expires, then are retried.
        log.exception("dispatch cycle %s stopped", cycle.holder)
        error = f"{type(exc).__name__}: {exc}"
    DispatchRun.objects.create(
        started_at=started,
        finished_at=timezone.now(),
        holder=cycle.holder,
        claimed=result.claimed,
        recovered=result.recovered,
        sent=result.by_status[Status.SENT],
        dropped=result.by_status[Status.DROPPED],
        retry=result.by_status[Status.RETRY],
        failed=result.by_status[Status.FAILED],
        error=error,
    )
    return result


def _run(cycle: _Cycle, limit: int | None, deadline: float) -> None:
    """Recover expired leases, then claim and process batches until nothing is due, `limit`
    rows were taken or the `deadline` (monotonic) passed."""
    result = cycle.result
    result.recovered = recover_expired_leases(cycle.clock())
    remaining = limit
    while remaining is None or remaining > 0:
        size = (
            settings.OUTBOX_BATCH_SIZE
            if remaining is None
            else min(remaining, settings.OUTBOX_BATCH_SIZE)
        )
        claim = claim_due(cycle.holder, size, cycle.clock())
        result.claimed += len(claim.ids)
        result.by_status[Status.DROPPED] += claim.superseded
        again = len(cycle.again)
        if claim.ids:
            result.by_status.update(_process_batch(cycle, claim.ids))
        if remaining is not None:
            remaining -= len(claim.ids) + claim.superseded
        # Rows this batch made due again at once are claimed again before the cycle ends.
        if (claim.selected < size and len(cycle.again) == again) or time.monotonic() > deadline:
            return


def _process_batch(cycle: _Cycle, ids: list[int]) -> Counter[Status]:
    rows = _load(ids, cycle.holder)
    with Lease(cycle.holder, {row.id: row.attempts for row in rows}, cycle.clock) as lease:
        decisions, held = _decide_and_deliver(cycle, rows, lease)
    return record(rows, decisions, cycle.holder, cycle.clock) + held


def _decide_and_deliver(
    cycle: _Cycle, rows: list[Outbox], lease: Lease
) -> tuple[dict[int, Decision], Counter[Status]]:
    """The decisions for a batch's rows, deliveries made; and what the quiet-hours hold
    already recorded."""
    decisions: dict[int, Decision] = {}
    live: list[Outbox] = []
    for row in rows:
        reason = guard(row)
        if reason:
            decisions[row.id] = Decision(Status.DROPPED, reason)
        else:
            live.append(row)
    live, held = hold_quiet_rows(live, cycle.holder, cycle.clock())

    # A product watch's row is re-checked on the product's offers (one request per product),
    # a listing watch's on its listing.
    fresh, asked = _refetch(
        cycle, {row.watch.listing_id: row.watch.listing for row in live if not row.watch.product_id}
    )
    offers, asked_products = _refetch_products(
        cycle, {row.watch.product_id for row in live if row.watch.product_id}
    )
    decisions.update(
        decide(
            live,
            {pk: result for pk, (_, result) in fresh.items()},
            {pk: answer for pk, (_, answer) in offers.items()},
        )
    )
    to_send = [
        (row, decisions[row.id].message) for row in live if decisions[row.id].message is not None
    ]
    if to_send:
        # A beat right before the first delivery also records the intent of each.
        lease.beat(starting=[row.id for row, _ in to_send])
        # When each row's value was fetched: the send gate holds back a delivery whose
        # value has grown older than OUTBOX_REFETCH_MAX_AGE by the time it comes up.
        fresh_at = {
            row.id: offers[row.watch.product_id][0]
            if row.watch.product_id
            else fresh[row.watch.listing_id][0]
            for row, _ in to_send
        }
        # Several rows for one device and channel go out as one digest; each row still
        # gets its own outcome from what the channel said about the digest.
        sends = digests.plan(to_send)
        delivered = deliver_all(sends, cycle.clock, lease, fresh_at)
        # Whose value this batch asked the marketplace for; any other was reused (a poll's
        # observation, or an answer from earlier in the cycle).
        reused = {
            row.id
            for row, _ in to_send
            if (
                row.watch.product_id not in asked_products
                if row.watch.product_id
                else row.watch.listing_id not in asked
            )
        }
        for (row, message), (_, delivery) in zip(sends, delivered, strict=True):
            rows = message.rows or (row.id,)
            for row_id in rows:
                decisions[row_id].digest = digests.membership(message, row_id)
                if delivery.gated_at is not None:
                    age = (delivery.gated_at - fresh_at[row_id]).total_seconds()
                    decisions[row_id].data["fresh_age_seconds"] = round(age, 3)
                apply_delivery(decisions[row_id], delivery)
            if delivery.error is not None and delivery.error.kind == DeliveryKind.EXPIRED:
                _again_at_once(cycle, decisions, rows, reused)
    return decisions, held


def _again_at_once(
    cycle: _Cycle, decisions: dict[int, Decision], rows: tuple[int, ...], reused: set[int]
) -> None:
    """A delivery (of `rows`: one, or a digest's) held back because a value it tells grew
    older than the bound: when one of those values was reused rather than asked for by this
    batch, the reuse is what made it old, not a slow marketplace or push service. Its rows
    are then due again at once and the retry is not counted: the next attempt (in this
    cycle) asks the marketplace, as it asks for a value older than the bound. Once per row
    per cycle — a value asked for anew that grows too old as well waits its backoff,
    counted, like any other. A digest stays one: once any of its rows was made due at once
    this cycle, the whole digest waits its backoff."""
    if not reused.intersection(rows) or cycle.again.intersection(rows):
        return
    cycle.again.update(rows)
    for decision in map(decisions.__getitem__, rows):
        decision.counted = False
        decision.at_once = True
        decision.data = {**(decision.data or {}), "reused_value": True}


def _refetch(
    cycle: _Cycle, listings: dict[int, Listing]
) -> tuple[dict[int, tuple[dt.datetime, FetchResult]], set[int]]:
    """The answer for each of `listings`, at most OUTBOX_REFETCH_MAX_AGE old: one asked for
    earlier in this cycle is reused while it is that fresh, and so is a poll's (or another
    dispatcher's) observation that fresh — the marketplace's budget is spent once; the
    others are fetched now, at most once per listing per batch. An answer's time is when it
    was asked for, or when a reused observation was made. Also the ids of the listings
    asked about now."""
    max_age = dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE)
    oldest = cycle.clock() - max_age
    stale = [
        listing
        for pk, listing in listings.items()
        if pk not in cycle.fetched or cycle.fetched[pk][0] < oldest
    ]
    asked: set[int] = set()
    if stale:
        asked_at = cycle.clock()
        # The listings were loaded with this batch's rows (`_load`), a moment ago: a poll's
        # observation since then is missed at worst, and asked for once more.
        answers, reused = services.refetch_or_reuse(
            stale, asked_at, fresh_within=max_age, as_loaded=True
        )
        cycle.fetched.update((pk, (_answered_at(asked_at, r), r)) for pk, r in answers.items())
        asked = answers.keys() - reused
    return {pk: cycle.fetched[pk] for pk in listings if pk in cycle.fetched}, asked


def _answered_at(asked_at: dt.datetime, result: FetchResult) -> dt.datetime:
    """A reused observation is as old as it was made; an answer fetched now, as old as the
    asking. The earlier of the two is never younger than the truth (an adapter stamps its
    answers on the system clock, which a test's clock may lead), so the bound still holds."""
    if isinstance(result, Observation):
        return min(asked_at, result.observed_at)
    return asked_at


def _refetch_products(
    cycle: _Cycle, product_ids: set[int]
) -> tuple[dict[int, tuple[dt.datetime, services.ProductAnswer]], set[int]]:
    """Every shop's offer of each of `product_ids`, at most OUTBOX_REFETCH_MAX_AGE old, by the
    rule of `_refetch`: one request per product and marketplace per batch, whatever the number
    of rows that watch it. Also the ids of the products asked about now."""
    oldest = cycle.clock() - dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE)
    stale = [pk for pk in product_ids if pk not in cycle.offers or cycle.offers[pk][0] < oldest]
    if stale:
        asked_at = cycle.clock()
        products = Product.objects.in_bulk(stale).values()
        answers = services.refetch_products(products, asked_at)
        cycle.offers.update((pk, (asked_at, answer)) for pk, answer in answers.items())
    return {pk: cycle.offers[pk] for pk in product_ids if pk in cycle.offers}, set(stale)


# What a cycle reads of its rows, their watches, listings and devices (`only()`): every
# field the guards, the re-fetch, the re-check, the digest, the channels and the recording
# read. A field missing here is loaded row by row on first read (tests/outbox/test_dispatch.py
# checks that a cycle's queries do not grow with its rows).
ROW_FIELDS = (
    "id",
    "watch",
    "device",
    "channel",
    "trigger",
    "status",
    "detected_at",
    "detected_payload",
    "retry_count",
    "attempts",
    "claimed_by",
    "attempt_started_at",
    "maybe_delivered",
)
WATCH_FIELDS = (
    "watch__id",
    "watch__device",
    "watch__listing",
    "watch__product",
    "watch__trigger",
    "watch__target_price",
    "watch__drop_percent",
    "watch__use_unit_price",
    "watch__after_points",
    "watch__paused",
    "watch__removed_at",
    "watch__last_notified_price",
    "watch__last_notified_at",
    "watch__last_notified_detected_at",
)
LISTING_FIELDS = (
    "id",
    "source",
    "item_code",
    "name",
    "shop_name",
    "url",
    "image_url",
    "units_per_pack",
    "unit_label",
    "paused",
    "price",
    "shipping",
    "in_stock",
    "points",
    "points_until",
    "points_after",
    "point_rate",
    "member_points",
    "typical_price",
    "low_90",
    "typical_net",
    "low_90_net",
    "stats_at",
    "last_polled_at",
    "last_error",
    "seen_via",
)


def _load(ids: list[int], holder: str) -> list[Outbox]:
    """The claimed rows with their watches, and one shared instance of each listing and
    device: a listing updated in memory by its re-fetch is then the same for every row of
    it."""
    rows = list(
        Outbox.objects.filter(id__in=ids, claimed_by=holder)
        .select_related("watch")
        .only(*ROW_FIELDS, *WATCH_FIELDS)
        .order_by("id")
    )
    listings = Listing.objects.only(*LISTING_FIELDS).in_bulk({row.watch.listing_id for row in rows})
    devices = Device.objects.in_bulk({row.device_id for row in rows})
    for row in rows:
        row.watch.listing = listings[row.watch.listing_id]
        row.device = devices[row.device_id]
    return rows
