"""The dispatcher: one cycle re-checks what detection enqueued and sends only what still holds.

A cycle (run every minute by django-q2, or by `manage.py dispatch_outbox`):
1. recovers expired leases: `sending` rows older than the lease go back to `retry`
   (`lease_expired`), or `failed` at the cap (`outbox.claims`);
2. selects due rows from the `outbox_due` index — `status IN (pending, retry) AND
   next_attempt_at <= now`, oldest first — and
3. claims them atomically in batches (one conditional UPDATE per batch; `FOR UPDATE SKIP
   LOCKED` on PostgreSQL), so any number of dispatchers can run at once (`outbox.claims`);
   a batch holds at most OUTBOX_BATCH_SIZE rows and no more re-checks than the marketplaces
   answer while the first answer is fresh — rows that share a listing or a product count
   once, so a crowd's rows fill a batch;
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
7. groups the rows sendable to one device on one channel into one digest (`outbox.digests`;
   a row alone is sent as it is) and delivers in steps the channel keeps up with
   (`outbox.pacing`): right before a step is handed over, each value it tells that could
   be older than OUTBOX_REFETCH_MAX_AGE when its delivery starts is re-fetched and judged
   again (5 and 6, for those rows), the lease is renewed with the step's intent
   (`outbox.lease`), and the step goes out (`outbox.delivery`, a bounded thread pool, no
   transaction open); then records, row by row, `sent` (moving the watch's
   `last_notified_*`), `retry` with backoff counted from the failure's answer, `failed` at
   the cap, or `dropped` (`outbox.recording`).

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
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from common.retrying import retrying
from outbox import digests
from outbox.channels.base import DeliveryKind, Message
from outbox.claims import Claim, claim_due, new_holder, recover_expired_leases
from outbox.clock import Clock, system_clock
from outbox.delivery import Freshness, deliver_all
from outbox.holds import hold_quiet_rows
from outbox.lease import Lease
from outbox.models import DispatchRun, Outbox, Status
from outbox.pacing import Pace
from outbox.queue import Candidate
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
    # ("listing" or "product", id) -> when the answer above was taken: an observation another
    # process stores after it (a poll's) is newer than that answer, which is then not reused
    seen: dict[tuple[str, int], dt.datetime] = field(default_factory=dict)
    # How fast the channels took this cycle's deliveries (`outbox.pacing`): a batch starts at
    # the pace the last one ended at.
    pace: Pace = field(
        default_factory=lambda: Pace(
            settings.OUTBOX_DELIVERY_WORKERS, settings.OUTBOX_REFETCH_MAX_AGE
        )
    )


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
    # Every step that writes is one transaction, run again when the database ends it to
    # break a deadlock (`common.retrying`): such a failure costs a pause, not the cycle.
    result.recovered = retrying(lambda: recover_expired_leases(cycle.clock()))
    # No more re-checks a batch than the marketplaces can answer while the first answer is
    # still fresh enough to send: a batch asks all its re-checks before its first delivery.
    rechecks = services.recheck_capacity(dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE))
    remaining = limit
    while remaining is None or remaining > 0:
        claim, drained = _claim_batch(cycle, rechecks, remaining)
        result.claimed += len(claim.ids)
        result.by_status[Status.DROPPED] += claim.superseded
        if claim.ids:
            result.by_status.update(_process_batch(cycle, claim.ids))
        if remaining is not None:
            remaining -= len(claim.ids) + claim.superseded
        if drained or time.monotonic() > deadline:
            return


def _claim_batch(cycle: _Cycle, rechecks: int | None, remaining: int | None) -> tuple[Claim, bool]:
    """Claim one batch: at most OUTBOX_BATCH_SIZE rows (and `remaining`) over at most
    `rechecks` re-checks (None: no marketplace limits them). Rows that share one — a
    listing's watches, a product's, a shop's listings read from its feed — cost one request
    between them, so the batch takes the oldest due rows and every later one whose re-check
    they already pay for (`_within`): a crowd's rows go out in batches as large as any
    other's, not in the few rows one id re-checks at a time, each batch's own work between
    them (bench/bench_delivery.py), and a sale's rows a shop's page at a time
    (bench/bench_recheck.py). Returns the claim, and whether it found the queue drained
    (fewer due rows than it asked for, none left)."""
    size = settings.OUTBOX_BATCH_SIZE
    if remaining is not None:
        size = min(size, remaining)
    keep = None if rechecks is None else _within(rechecks)
    claim = retrying(lambda: claim_due(cycle.holder, size, cycle.clock(), keep))
    return claim, claim.selected < size and not claim.left


def _within(rechecks: int) -> Callable[[list[Candidate]], list[Candidate]]:
    """Which of the due rows selected, oldest first, a batch can re-check with about
    `rechecks` requests: rows that share a re-check — a listing's watches, a product's, the
    listings of one shop whose feed answers them together (`services.recheck_units`) — cost
    one between them. The oldest rows go first, and with them every later row whose re-check
    is already paid for; a row that would need one re-check too many waits for the next
    batch. A sale's rows due one shop after another still go out a shop's page at a time."""

    def keep(selected: list[Candidate]) -> list[Candidate]:
        units = services.recheck_units({candidate.row.watch_id for candidate in selected})
        paid: set[tuple[str | int, ...]] = set()
        kept: list[Candidate] = []
        for candidate in selected:
            unit = units.get(candidate.row.watch_id)
            if unit is not None and unit not in paid:
                if len(paid) >= rechecks and kept:  # a batch holds one row at least
                    continue
                paid.add(unit)
            kept.append(candidate)
        return kept

    return keep


def _process_batch(cycle: _Cycle, ids: list[int]) -> Counter[Status]:
    rows = _load(ids, cycle.holder)
    with Lease(cycle.holder, {row.id: row.attempts for row in rows}, cycle.clock) as lease:
        decisions, held = _decide_and_deliver(cycle, rows, lease)
    return retrying(lambda: record(rows, decisions, cycle.holder, cycle.clock)) + held


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
    live, held = retrying(lambda: hold_quiet_rows(live, cycle.holder, cycle.clock()))

    # When each row's value was fetched: the send gate holds back a delivery whose value has
    # grown older than OUTBOX_REFETCH_MAX_AGE by the time it comes up.
    freshness = Freshness()
    max_age = dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE)
    _recheck(cycle, live, decisions, freshness, max_age)
    to_send = [(row, message) for row in live if (message := decisions[row.id].message) is not None]
    if to_send:
        # Several rows for one device and channel go out as one digest; each row still gets
        # its own outcome from what the channel said about the digest.
        sends = digests.plan(to_send)
        _deliver_in_steps(cycle, sends, {row.id: row for row in live}, decisions, freshness, lease)
    return decisions, held


def _recheck(
    cycle: _Cycle,
    rows: list[Outbox],
    decisions: dict[int, Decision],
    freshness: Freshness,
    within: dt.timedelta,
) -> set[int]:
    """Steps 5 and 6 for `rows`: the fresh value of each — a product watch's row on the
    product's offers (one request per product), a listing watch's on its listing — at most
    `within` old, then the trigger judged again on it. Writes each row's decision and when
    its value was fetched. Returns the ids of the rows whose value was asked for now."""
    fresh, asked = _refetch(
        cycle,
        {row.watch.listing_id: row.watch.listing for row in rows if not row.watch.product_id},
        within,
    )
    offers, asked_products = _refetch_products(
        cycle, {row.watch.product_id for row in rows if row.watch.product_id}, within
    )
    checked = cycle.clock()
    decided = decide(
        rows,
        {pk: result for pk, (_, result) in fresh.items()},
        {pk: answer for pk, (_, answer) in offers.items()},
    )
    for decision in decided.values():
        if decision.to == Status.RETRY:
            # Its backoff, or a halted marketplace's next probe, counts from the answers it
            # got, not from when the batch is recorded after its deliveries.
            decision.answered_at = checked
    decisions.update(decided)
    now_asked: set[int] = set()
    for row in rows:
        product = row.watch.product_id
        answer = offers.get(product) if product else fresh.get(row.watch.listing_id)
        if answer is not None:
            freshness.at[row.id] = answer[0]
        # A value that stops holding at a known moment (the points of a campaign that ends):
        # the send gate does not hand it over from then on.
        freshness.until.pop(row.id, None)
        if (ends := decided[row.id].good_until) is not None:
            freshness.until[row.id] = ends
        if (product in asked_products) if product else (row.watch.listing_id in asked):
            now_asked.add(row.id)
    return now_asked


def _deliver_in_steps(
    cycle: _Cycle,
    sends: list[tuple[Outbox, Message]],
    by_id: dict[int, Outbox],
    decisions: dict[int, Decision],
    freshness: Freshness,
    lease: Lease,
) -> None:
    """Step 7: deliver `sends` (each a row's message or a digest) in steps the channel keeps
    up with (`outbox.pacing`). Right before a step is handed over, each row it tells whose
    value could be older than OUTBOX_REFETCH_MAX_AGE when its delivery starts is re-fetched
    and judged again (steps 5 and 6, for those rows): a row that no longer holds leaves its
    delivery, one that still does is told its fresh value. A beat of the lease then writes
    the step's rows' intent, and the step is delivered. A delivery the send gate still held
    back for its value's age goes back for the next step, once, when none of its values
    was just asked for (it aged waiting for the channel); otherwise the answer itself came
    too late, and the row waits its backoff, counted. Each delivery's answer becomes each of
    its rows' decision."""
    pace = cycle.pace
    waiting = deque(sends)
    held_back: set[int] = set()
    while waiting:
        step = [waiting.popleft() for _ in range(min(pace.step_size(), len(waiting)))]
        within = pace.fresh_within(len(step))
        now = timezone.now()
        oldest = now - within
        # The step may take what the pace leaves of the bound: points that end by then are
        # asked about again now too.
        ending = now + dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE) - within
        aged = [
            by_id[row_id]
            for row, message in step
            for row_id in message.rows or (row.id,)
            if freshness.at[row_id] < oldest or freshness.until.get(row_id, ending) < ending
        ]
        asked = _recheck(cycle, aged, decisions, freshness, within) if aged else set()
        if aged:
            step = _still_to_send(step, decisions, by_id)
        if not step:
            continue
        # The intent of each row, with the digest it goes out in (a re-send after a crash
        # keeps that form: `digests.plan`).
        lease.beat(
            starting=[row_id for row, m in step for row_id in m.rows or (row.id,)],
            digests={
                row_id: {"id": m.digest_id, "tag": m.tag}
                for _, m in step
                if m.digest_id
                for row_id in m.rows
            },
        )
        # On the clock the gate reads ages on (`outbox.delivery`): the pace is what decides
        # how old a value may be when its step is handed over.
        started = timezone.now()
        delivered = deliver_all(step, cycle.clock, lease, freshness)
        # Deliveries the gate held back return at once: they say nothing of the channel.
        pace.measured(
            sum(1 for _, delivery in delivered if delivery.answered_at is not None),
            (timezone.now() - started).total_seconds(),
        )
        back = []
        for (row, message), (_, delivery) in zip(step, delivered, strict=True):
            rows = message.rows or (row.id,)
            expired = delivery.error is not None and delivery.error.kind == DeliveryKind.EXPIRED
            if expired and not asked.intersection(rows) and not held_back.intersection(rows):
                held_back.update(rows)
                back.append((row, message))
                continue
            for row_id in rows:
                decision = decisions[row_id]
                decision.digest = digests.membership(message, row_id)
                if delivery.gated_at is not None:
                    age = (delivery.gated_at - freshness.at[row_id]).total_seconds()
                    decision.data = {**(decision.data or {}), "fresh_age_seconds": round(age, 3)}
                apply_delivery(decision, delivery)
        waiting.extendleft(reversed(back))


def _still_to_send(
    step: list[tuple[Outbox, Message]], decisions: dict[int, Decision], by_id: dict[int, Outbox]
) -> list[tuple[Outbox, Message]]:
    """The deliveries of `step` after some of their rows were judged again: each with the
    rows that still hold, told their fresh values (`digests.regroup`)."""
    still = []
    for row, message in step:
        holding = [
            (by_id[row_id], fresh)
            for row_id in message.rows or (row.id,)
            if (fresh := decisions[row_id].message) is not None
        ]
        send = digests.regroup(message, holding)
        if send is not None:
            still.append(send)
    return still


def _refetch(
    cycle: _Cycle, listings: dict[int, Listing], within: dt.timedelta
) -> tuple[dict[int, tuple[dt.datetime, FetchResult]], set[int]]:
    """The answer for each of `listings`, at most `within` old: one asked for earlier in this
    cycle is reused while it is that fresh, and so is a poll's (or another dispatcher's)
    observation that fresh — the marketplace's budget is spent once; the others are fetched
    now, at most once per listing per call — and a request another dispatcher is making is
    waited for rather than made again (`watches.polling.inflight`). An answer's time is when
    it was asked for, or when a reused observation was made. One of this cycle's answers is
    not reused once the listing, as loaded, was observed after it (a poll's newer price, or
    failure), nor once the points campaign it tells has ended. Also the ids of the listings
    asked about now."""
    oldest = cycle.clock() - within
    now = timezone.now()
    stale = [
        listing
        for pk, listing in listings.items()
        if pk not in cycle.fetched
        or cycle.fetched[pk][0] < oldest
        or _points_ended(cycle.fetched[pk][1], now)
        or _observed_since(listing.last_polled_at, cycle.seen.get(("listing", pk)))
    ]
    asked: set[int] = set()
    if stale:
        asked_at = cycle.clock()
        # The listings were loaded with this batch's rows (`_load`), a moment ago: a poll's
        # observation since then is missed at worst, and asked for once more.
        answers, reused = services.refetch_or_reuse(
            stale, asked_at, fresh_within=within, as_loaded=True
        )
        taken = timezone.now()
        cycle.fetched.update((pk, (_answered_at(asked_at, r), r)) for pk, r in answers.items())
        cycle.seen.update((("listing", pk), taken) for pk in answers)
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
    cycle: _Cycle, product_ids: set[int], within: dt.timedelta
) -> tuple[dict[int, tuple[dt.datetime, services.ProductAnswer]], set[int]]:
    """Every shop's offer of each of `product_ids`, at most `within` old, by the rule of
    `_refetch`: one request per product and marketplace per call, whatever the number of
    rows that watch it; a poll's (or another dispatcher's) answer that fresh is the answer.
    An answer of this cycle is not reused once an offer of the product was observed after it
    (a poll's read of its page, and a new shop's offer with it), nor once a points campaign
    it tells has ended. Also the ids of the products asked about now."""
    oldest = cycle.clock() - within
    now = timezone.now()
    kept = [
        pk
        for pk in product_ids
        if pk in cycle.offers
        and cycle.offers[pk][0] >= oldest
        and not any(_points_ended(result, now) for _, result in cycle.offers[pk][1].offers)
    ]
    observed = (
        dict(
            Listing.objects.filter(product_id__in=kept)
            .order_by()
            .values("product_id")
            .annotate(latest=Max("last_polled_at"))
            .values_list("product_id", "latest")
        )
        if kept
        else {}
    )
    kept = [
        pk for pk in kept if not _observed_since(observed.get(pk), cycle.seen.get(("product", pk)))
    ]
    stale = [pk for pk in product_ids if pk not in kept]
    asked: set[int] = set()
    if stale:
        asked_at = cycle.clock()
        products = Product.objects.in_bulk(stale).values()
        answers = services.refetch_products(products, asked_at, fresh_within=within)
        taken = timezone.now()
        for pk, answer in answers.items():
            cycle.offers[pk] = (_offers_answered_at(asked_at, answer), answer)
            cycle.seen[("product", pk)] = taken
            if not answer.reused:
                asked.add(pk)
    return {pk: cycle.offers[pk] for pk in product_ids if pk in cycle.offers}, asked


def _points_ended(result: FetchResult, now: dt.datetime) -> bool:
    """Whether `result` tells the points of a campaign that has ended by `now`."""
    return (
        isinstance(result, Observation)
        and result.points_until is not None
        and result.points_until <= now
    )


def _observed_since(observed: dt.datetime | None, taken: dt.datetime | None) -> bool:
    """Whether an observation stored at `observed` is newer than an answer taken at `taken`."""
    return observed is not None and taken is not None and observed > taken


def _offers_answered_at(asked_at: dt.datetime, answer: services.ProductAnswer) -> dt.datetime:
    """As `_answered_at`, for a product's offers: a reused part is as old as its oldest
    offer's observation."""
    observed = answer.observed_at() if answer.reused else None
    return min(asked_at, observed) if observed is not None else asked_at


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
    # Offers of one product are re-checked together (`watches.products.refetch`), and
    # marked as one request in flight (`watches.polling.inflight`).
    "product_id",
    "jan",
    "beyond_product_page",
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
