"""The dispatcher: one cycle re-checks what detection enqueued and sends only what still holds.

A cycle (run every minute by django-q2, or by `manage.py dispatch_outbox`):
1. recovers expired leases: `sending` rows older than the lease go back to `retry`
   (`lease_expired`), or `failed` at the cap;
2. selects due rows from the `outbox_due` index — `status IN (pending, retry) AND
   next_attempt_at <= now`, oldest first — and
3. claims them atomically in batches (one conditional UPDATE per batch; `FOR UPDATE SKIP
   LOCKED` on PostgreSQL), so any number of dispatchers can run at once;
4. drops rows whose watch was removed or paused, whose listing was paused, or whose device
   has no subscription;
5. re-fetches each listing once per cycle through its marketplace adapter (every re-fetch is
   also a PricePoint); an error kind becomes a drop or a retry;
6. re-judges the trigger on the fresh value (and drops `already_notified` when a later
   delivery moved the watch's baseline past this detection);
7. builds the message from the fresh value, delivers it, and records `sent` (moving the watch's
   `last_notified_*`), `retry` with backoff, `failed` at the cap, or `dropped`.

State changes are short transactions written in bulk; no network call happens inside one.
Every later transition of a claimed row is conditional on the claim's fence — the holder token
(`claimed_by`, new for every cycle) and the attempt number the claim gave the row (`attempts`)
— so a dispatcher that lost its lease cannot record over the one that took the row over.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from monitoring.counters import delivery_timer
from outbox.channels.base import DeliveryError, DeliveryKind, Message, get_channel
from outbox.messages import build_message
from outbox.models import DispatchRun, Outbox, Reason, Status
from outbox.queue import select_due, select_expired
from outbox.transitions import EventInfo, transition
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    get_marketplace,
)
from watches.models import Channel, Device, Listing, PricePoint, Watch
from watches.triggers import Judgement, recheck

log = logging.getLogger("outbox.dispatch")

FETCH_OUTCOME: dict[FetchKind, tuple[Status, Reason]] = {
    FetchKind.EMPTY: (Status.DROPPED, Reason.OUT_OF_STOCK),
    FetchKind.NOT_FOUND: (Status.DROPPED, Reason.ITEM_NOT_FOUND),
    FetchKind.RATE_LIMITED: (Status.RETRY, Reason.REFETCH_RATE_LIMITED),
    FetchKind.NETWORK: (Status.RETRY, Reason.REFETCH_NETWORK),
    FetchKind.SERVER: (Status.RETRY, Reason.REFETCH_SERVER),
    FetchKind.BAD_RESPONSE: (Status.RETRY, Reason.REFETCH_BAD_RESPONSE),
}

DELIVERY_OUTCOME: dict[DeliveryKind, tuple[Status, Reason]] = {
    DeliveryKind.RATE_LIMITED: (Status.RETRY, Reason.DELIVER_RATE_LIMITED),
    DeliveryKind.NETWORK: (Status.RETRY, Reason.DELIVER_NETWORK),
    DeliveryKind.SERVER: (Status.RETRY, Reason.DELIVER_SERVER),
    DeliveryKind.GONE: (Status.DROPPED, Reason.SUBSCRIPTION_GONE),
    DeliveryKind.REJECTED: (Status.FAILED, Reason.DELIVER_REJECTED),
}

# A marketplace asking for more than a day is treated as a day: the row stays alive.
_MAX_RETRY_AFTER = 24 * 3600


@dataclass
class CycleResult:
    sent: int = 0
    dropped: int = 0
    retry: int = 0
    failed: int = 0
    recovered: int = 0
    claimed: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "dropped": self.dropped,
            "retry": self.retry,
            "failed": self.failed,
            "recovered": self.recovered,
        }


@dataclass
class _Outcome:
    """Where one claimed row goes, decided in memory and then written in bulk."""

    to: Status
    reason: Reason
    detail: str = ""
    data: dict | None = None
    retry_after: float | None = None
    message: Message | None = None
    judgement: Judgement | None = None


@dataclass
class _Cycle:
    holder: str
    now: dt.datetime
    result: CycleResult = field(default_factory=CycleResult)
    # (source, item_code) -> the one re-fetch of this cycle
    fetched: dict[tuple[str, str], FetchResult] = field(default_factory=dict)


def new_holder() -> str:
    """A per-cycle claim token: which host and process, and a random part so two cycles of
    the same process never share one."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def backoff(retry_count: int, retry_after: float | None = None) -> dt.timedelta:
    """min(2**retry_count * 30 s, 30 min), or the server's Retry-After when that is longer."""
    base = settings.OUTBOX_BACKOFF_BASE_SECONDS
    delay = min(base * 2**retry_count, settings.OUTBOX_BACKOFF_CAP_SECONDS)
    if retry_after is not None and retry_after > delay:
        delay = min(retry_after, _MAX_RETRY_AFTER)
    return dt.timedelta(seconds=delay)


def run_cycle(
    *, limit: int | None = None, now: dt.datetime | None = None, holder: str | None = None
) -> CycleResult:
    """One dispatcher cycle over at most `limit` due rows (default: until nothing is due or
    OUTBOX_CYCLE_SECONDS have passed). Returns the outcome counts."""
    started = timezone.now()
    cycle = _Cycle(holder=holder or new_holder(), now=now or started)
    error = ""
    deadline = time.monotonic() + settings.OUTBOX_CYCLE_SECONDS
    try:
        cycle.result.recovered = recover_expired_leases(cycle.now)
        remaining = limit
        while remaining is None or remaining > 0:
            size = (
                settings.OUTBOX_BATCH_SIZE
                if remaining is None
                else min(remaining, settings.OUTBOX_BATCH_SIZE)
            )
            claimed = claim_due(cycle.holder, size, cycle.now)
            cycle.result.claimed += len(claimed)
            if claimed:
                _process_batch(cycle, claimed)
            if remaining is not None:
                remaining -= len(claimed)
            if len(claimed) < size or time.monotonic() > deadline:
                break
    except Exception as exc:
        # Rows already claimed stay `sending` until their lease expires, then are retried.
        log.exception("dispatch cycle %s stopped", cycle.holder)
        error = f"{type(exc).__name__}: {exc}"
    DispatchRun.objects.create(
        started_at=started,
        finished_at=timezone.now(),
        holder=cycle.holder,
        claimed=cycle.result.claimed,
        error=error,
        **cycle.result.counts(),
    )
    return cycle.result


def recover_expired_leases(now: dt.datetime) -> int:
    """`sending` rows whose lease expired (their dispatcher died or hung) go back to `retry`,
    or to `failed` when they already used every retry. Returns how many were recovered."""
    cutoff = now - dt.timedelta(seconds=settings.OUTBOX_LEASE_SECONDS)
    recovered = 0
    with transaction.atomic():
        rows = select_expired(cutoff)
        if not rows:
            return 0
        events = {
            row_id: EventInfo(detail=f"lease of {holder} expired", data={"holder": holder})
            for row_id, _, holder in rows
        }
        capped = [row_id for row_id, count, _ in rows if count >= settings.OUTBOX_MAX_RETRY]
        again = [(row_id, count) for row_id, count, _ in rows if count < settings.OUTBOX_MAX_RETRY]
        recovered += len(
            transition(
                capped,
                to=Status.FAILED,
                reason=Reason.LEASE_EXPIRED,
                expect=[Status.SENDING],
                set_fields={"claimed_by": ""},
                events=events,
                now=now,
            )
        )
        recovered += len(
            transition(
                [row_id for row_id, _ in again],
                to=Status.RETRY,
                reason=Reason.LEASE_EXPIRED,
                expect=[Status.SENDING],
                set_fields={"claimed_by": ""},
                events=events,
                now=now,
                per_row={
                    "retry_count": {row_id: count + 1 for row_id, count in again},
                    "next_attempt_at": {row_id: now + backoff(count) for row_id, count in again},
                },
            )
        )
    return recovered


def claim_due(holder: str, limit: int, now: dt.datetime) -> list[int]:
    """Claim up to `limit` due rows, oldest first, for `holder`. Returns the claimed ids."""
    with transaction.atomic():
        return transition(
            select_due(now, limit),
            to=Status.SENDING,
            reason=Reason.CLAIMED,
            set_fields={"claimed_by": holder, "claimed_at": now},
            # The claim's fence: a new holder token, and the row's next attempt number.
            increment=["attempts"],
            actor=holder,
            now=now,
        )


def _process_batch(cycle: _Cycle, ids: list[int]) -> None:
    rows = _load(ids, cycle.holder)
    outcomes: dict[int, _Outcome] = {}

    # 4. Pre-guards: no need to ask the marketplace about these.
    live: list[Outbox] = []
    for row in rows:
        reason = _guard(row)
        if reason:
            outcomes[row.pk] = _Outcome(Status.DROPPED, reason)
        else:
            live.append(row)

    # 5. Re-fetch each listing once per cycle.
    _refetch(cycle, {row.watch.listing for row in live})

    # 6. Re-judge on the fresh value; of two rows for the same watch and channel, only the
    # newest may go out.
    to_send: list[tuple[Outbox, Observation, Judgement]] = []
    seen: set[tuple[int, str]] = set()
    for row in sorted(live, key=lambda r: r.detected_at, reverse=True):
        listing = row.watch.listing
        result = cycle.fetched.get((listing.source, listing.item_code))
        if isinstance(result, FetchError) or result is None:
            error = result or FetchError(FetchKind.NETWORK, "no answer for this item")
            to, reason = FETCH_OUTCOME[error.kind]
            outcomes[row.pk] = _Outcome(
                to,
                reason,
                error.detail,
                {"fetch_error": error.kind.value, "detail": error.detail},
                retry_after=error.retry_after,
            )
            continue
        judgement = recheck(
            row.watch, listing.units_per_pack, result, row.detected_payload, row.detected_at
        )
        facts = {
            "fresh": result.as_json(),
            "value": _str(judgement.value),
            "line": _str(judgement.line),
        }
        key = (row.watch_id, row.channel)
        if judgement.holds and key in seen:
            judgement = Judgement(False, Reason.ALREADY_NOTIFIED, judgement.value, judgement.line)
        if not judgement.holds:
            outcomes[row.pk] = _Outcome(Status.DROPPED, Reason(judgement.reason), data=facts)
            continue
        seen.add(key)
        message = build_message(row, row.watch, listing, result, judgement, row.device.language)
        facts["message"] = message.as_json()
        outcomes[row.pk] = _Outcome(
            Status.SENT, Reason.DELIVERED, data=facts, message=message, judgement=judgement
        )
        to_send.append((row, result, judgement))

    # 7. Deliver (network, no transaction open), then record everything in bulk.
    for row, error in _deliver_all([(row, outcomes[row.pk].message) for row, _, _ in to_send]):
        if error is None:
            continue
        outcome = outcomes[row.pk]
        to, reason = DELIVERY_OUTCOME[error.kind]
        outcome.to, outcome.reason, outcome.retry_after = to, reason, error.retry_after
        outcome.detail = error.message
        outcome.data = {
            **(outcome.data or {}),
            "delivery_error": error.kind.value,
            "status_code": error.status_code,
        }
    _record(cycle, rows, outcomes)


_UNREAD_FIELDS = (
    "previous_status",
    "reason",
    "detail",
    "sent_message",
    "next_attempt_at",
    "claimed_at",
    "sent_at",
    "created_at",
    "updated_at",
)


def _load(ids: list[int], holder: str) -> list[Outbox]:
    """The claimed rows with their watches, and one shared instance of each listing and
    device: rows of a batch share few listings, so this builds far fewer model instances
    than a join per row would, and a listing updated by its re-fetch is the same for all."""
    rows = list(
        Outbox.objects.filter(id__in=ids, claimed_by=holder)
        .select_related("watch")
        # What a cycle never reads: converting these (datetimes above all) cost more than
        # the rest of the row.
        .defer(*_UNREAD_FIELDS)
        .order_by("id")
    )
    listings = Listing.objects.in_bulk({row.watch.listing_id for row in rows})
    devices = Device.objects.in_bulk({row.device_id for row in rows})
    for row in rows:
        row.watch.listing = listings[row.watch.listing_id]
        row.device = devices[row.device_id]
    return rows


def _guard(row: Outbox) -> Reason | None:
    watch, device = row.watch, row.device
    if watch.removed_at is not None:
        return Reason.WATCH_REMOVED
    if watch.paused:
        return Reason.WATCH_PAUSED
    if watch.listing.paused:
        return Reason.LISTING_PAUSED
    if row.channel == Channel.WEBPUSH and not device.can_receive:
        return Reason.NO_SUBSCRIPTION
    return None


def _refetch(cycle: _Cycle, listings: Iterable[Listing]) -> None:
    by_source: dict[str, list[Listing]] = defaultdict(list)
    for listing in listings:
        if (listing.source, listing.item_code) not in cycle.fetched:
            by_source[listing.source].append(listing)
    fresh: list[tuple[Listing, FetchResult]] = []
    for source, group in by_source.items():
        codes = [listing.item_code for listing in group]
        try:
            results = get_marketplace(source).fetch(codes)
        except Exception as exc:  # a bug in an adapter must not stop the cycle
            log.exception("marketplace %s failed", source)
            results = {
                code: FetchError(FetchKind.BAD_RESPONSE, f"{type(exc).__name__}: {exc}")
                for code in codes
            }
        for listing in group:
            result = results.get(listing.item_code) or FetchError(
                FetchKind.BAD_RESPONSE, "the marketplace did not answer for this item"
            )
            cycle.fetched[(source, listing.item_code)] = result
            fresh.append((listing, result))
    _remember_observations(fresh, cycle.now)


def _remember_observations(fresh: list[tuple[Listing, FetchResult]], now: dt.datetime) -> None:
    """Every re-fetch is also history: a PricePoint, and the listing's last-seen state."""
    points: list[PricePoint] = []
    changed: list[Listing] = []
    for listing, result in fresh:
        if isinstance(result, Observation):
            points.append(PricePoint.from_observation(listing, result))
            listing.price, listing.shipping, listing.in_stock = (
                result.price,
                result.shipping,
                result.in_stock,
            )
            listing.last_polled_at, listing.last_error = result.observed_at, ""
        elif result.kind == FetchKind.EMPTY:
            points.append(
                PricePoint(
                    listing=listing,
                    observed_at=now,
                    price=listing.price,
                    shipping=listing.shipping,
                    in_stock=False,
                )
            )
            listing.in_stock, listing.last_polled_at, listing.last_error = False, now, ""
        else:
            listing.last_error, listing.last_error_at = f"{result.kind}: {result.detail}"[:200], now
        changed.append(listing)
    if not changed:
        return
    with transaction.atomic():
        PricePoint.objects.bulk_create(points, batch_size=500)
        Listing.objects.bulk_update(
            changed,
            ["price", "shipping", "in_stock", "last_polled_at", "last_error", "last_error_at"],
            batch_size=500,
        )


def _deliver_all(
    items: list[tuple[Outbox, Message]],
) -> list[tuple[Outbox, DeliveryError | None]]:
    """Deliver concurrently with a bounded pool: delivery waits on the network, not the CPU.
    At most OUTBOX_DELIVERY_WORKERS threads each take the next message until none is left
    (cheaper than a future per message, and a slow answer holds up only its own thread).
    The threads never touch the database."""
    workers = min(settings.OUTBOX_DELIVERY_WORKERS, len(items))
    if workers <= 1:
        return [(row, _deliver_one(row, message)) for row, message in items]
    # A message whose thread died before it finished counts as not delivered: retried.
    unfinished = DeliveryError(DeliveryKind.NETWORK, "the delivery thread stopped early")
    errors: list[DeliveryError | None] = [unfinished] * len(items)
    queue = iter(enumerate(items))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            index, (row, message) = item
            errors[index] = _deliver_one(row, message)

    threads = [
        threading.Thread(target=work, name=f"outbox-deliver-{n}", daemon=True)
        for n in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return list(zip((row for row, _ in items), errors, strict=True))


def _deliver_one(row: Outbox, message: Message) -> DeliveryError | None:
    try:
        with delivery_timer(row.channel):
            get_channel(row.channel).deliver(row, message)
    except DeliveryError as error:
        return error
    except Exception as exc:  # a bug in a channel: retry until the cap, then failed
        log.exception("channel %s failed on row %s", row.channel, row.pk)
        return DeliveryError(DeliveryKind.SERVER, f"unexpected {type(exc).__name__}: {exc}")
    return None


def _record(cycle: _Cycle, rows: list[Outbox], outcomes: dict[int, _Outcome]) -> None:
    """Write every outcome of the batch: one conditional UPDATE per (status, reason) group."""
    now = cycle.now
    by_row = {row.pk: row for row in rows}
    groups: dict[tuple[Status, Reason], list[int]] = defaultdict(list)
    for row_id, outcome in outcomes.items():
        to = outcome.to
        if to == Status.RETRY and by_row[row_id].retry_count >= settings.OUTBOX_MAX_RETRY:
            to = outcome.to = Status.FAILED  # the cap: this was the last try
        groups[(to, outcome.reason)].append(row_id)

    with transaction.atomic():
        for (to, reason), ids in groups.items():
            events = {i: EventInfo(outcomes[i].detail, outcomes[i].data) for i in ids}
            common = {"claimed_by": "", "detail": ""}
            per_row: dict[str, dict[int, object]] = {"detail": {i: outcomes[i].detail for i in ids}}
            increment: list[str] = []
            if to == Status.SENT:
                common["sent_at"] = now
                per_row["sent_message"] = {i: outcomes[i].message.as_json() for i in ids}
            elif to == Status.RETRY:
                increment.append("retry_count")
                per_row["next_attempt_at"] = {
                    i: now + backoff(by_row[i].retry_count, outcomes[i].retry_after) for i in ids
                }
            won = transition(
                ids,
                to=to,
                reason=reason,
                expect=[Status.SENDING],
                holder=cycle.holder,
                attempts={i: by_row[i].attempts for i in ids},
                set_fields=common,
                per_row=per_row,
                increment=increment,
                events=events,
                actor=cycle.holder,
                now=now,
            )
            lost = len(ids) - len(won)
            if lost:
                log.warning(
                    "%d row(s) were taken over before %s could record them", lost, cycle.holder
                )
            setattr(cycle.result, to.value, getattr(cycle.result, to.value) + len(won))
            if to == Status.SENT and won:
                _advance_baselines([(by_row[i], outcomes[i]) for i in won], now)
            if reason == Reason.SUBSCRIPTION_GONE and won:
                _deactivate_gone([by_row[i].device for i in won])


def _deactivate_gone(devices: list[Device]) -> None:
    """Deactivate the subscriptions the push service called gone — by device *and* endpoint:
    a browser that re-subscribed while we were sending keeps its new subscription."""
    gone = Q()
    for pk, endpoint in {(device.pk, device.push_endpoint) for device in devices}:
        gone |= Q(pk=pk, push_endpoint=endpoint)
    Device.objects.filter(gone).update(push_active=False)


def _advance_baselines(sent: list[tuple[Outbox, _Outcome]], now: dt.datetime) -> None:
    """Only a delivered notification moves the watch's baseline. executemany of one UPDATE per
    watch: Django's bulk_update builds a CASE per row and costs more than the rows."""
    price_field = Watch._meta.get_field("last_notified_price")
    at = Watch._meta.get_field("last_notified_at").get_db_prep_save(now, connection)
    params = {
        row.watch_id: (
            price_field.get_db_prep_save(outcome.judgement.value, connection),
            at,
            row.watch_id,
        )
        for row, outcome in sent
    }
    table = connection.ops.quote_name(Watch._meta.db_table)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET last_notified_price = %s, last_notified_at = %s WHERE id = %s",  # noqa: S608
            list(params.values()),
        )


def _str(value) -> str | None:
    return None if value is None else str(value)
