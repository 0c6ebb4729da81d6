"""Price polling: look at every active listing that is due, keep its history, and enqueue what
its watches' triggers detect.

A run takes due listings (not paused, least recently polled first) in batches of one source
and, for each batch:
1. fetches them through the marketplace adapter (network; no transaction open);
2. loads, in one query each, the batch's recent price points and its live watches (not
   paused, not removed) with their devices;
3. per listing, builds its History once from the points *before* this observation, and judges
   every live watch with `watches.triggers.detect`;
4. in one short transaction: writes a PricePoint per observation (skipped when nothing changed
   and the last point is younger than POLL_HISTORY_MIN_MINUTES), updates the listings
   (last seen price and stock, or the error), and enqueues every detection through the bulk
   `outbox.enqueue.enqueue_many`, which folds a detection already enqueued today.

A marketplace error is recorded on the listing (`last_error`) and counted; it never stops
the run. Triggers are judged on observations only: an error tells nothing about the price.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Min, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from outbox.enqueue import Detection, enqueue_many
from watches import pagecache
from watches.history import stats
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    get_marketplace,
)
from watches.missed import record_missed
from watches.models import Listing, PricePoint, Watch
from watches.triggers import LOW_WINDOW, History, Judgement, Point, build_history, detect

log = logging.getLogger("watches.polling")

Progress = Callable[[int, int], None]


@dataclass
class PollResult:
    listings: int = 0  # listings asked about
    observations: int = 0  # answers with a price/stock (out of stock included)
    errors: int = 0  # answers that were an error (not found, unreachable…)
    enqueued: int = 0  # outbox rows really inserted (not folded into today's row)
    points: int = 0  # price points written

    def as_json(self) -> dict[str, int]:
        return {
            "listings": self.listings,
            "observations": self.observations,
            "errors": self.errors,
            "enqueued": self.enqueued,
        }

    def add(self, other: PollResult) -> None:
        for name in ("listings", "observations", "errors", "enqueued", "points"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def due_listings(
    now: dt.datetime, *, source: str | None = None, force: bool = False
) -> QuerySet[Listing]:
    """Active listings due for polling, least recently polled first (the `listing_poll_due`
    index). Due means not polled for half the polling interval: a run that started a little
    late or took a while must not push a listing to the run after next. A re-fetch by the
    dispatcher counts as a poll, and so does an attempt that ended in an error — so a
    failing listing waits its turn instead of heading every run."""
    queryset = Listing.objects.filter(paused=False)
    if source is not None:
        queryset = queryset.filter(source=source)
    if not force:
        cutoff = now - _due_after()
        queryset = queryset.filter(Q(last_polled_at__isnull=True) | Q(last_polled_at__lte=cutoff))
    return queryset.order_by(F("last_polled_at").asc(nulls_first=True), "id")


def next_due_at() -> dt.datetime | None:
    """When the least recently polled active listing falls due, by the rule of
    `due_listings` (now or earlier when one is due already); None when no listing is
    active."""
    oldest = Listing.objects.filter(paused=False).aggregate(
        never=Count("pk", filter=Q(last_polled_at__isnull=True)),
        active=Count("pk"),
        oldest=Min("last_polled_at"),
    )
    if not oldest["active"]:
        return None
    if oldest["never"]:
        return timezone.now()
    return oldest["oldest"] + _due_after()


def _due_after() -> dt.timedelta:
    return dt.timedelta(minutes=settings.POLL_MINUTES) / 2


def poll(
    *,
    codes: Sequence[str] | None = None,
    source: str | None = None,
    force: bool = False,
    max_seconds: float | None = None,
    progress: Progress | None = None,
    now: dt.datetime | None = None,
) -> PollResult:
    """Poll the due listings (or exactly the listings with item `codes`, due or not; or
    every active listing of `source` with `force`). Starts no new batch once `max_seconds`
    have passed (the first batch always runs). Returns the counts."""
    now = now or timezone.now()
    if codes is not None:
        queryset = Listing.objects.filter(item_code__in=list(codes)).order_by("id")
    else:
        queryset = due_listings(now, source=source, force=force)
    # Ids first, then batches: the listing rows are read fresh right before each fetch.
    pending = list(queryset.values_list("id", "source"))
    total = len(pending)
    result = PollResult()
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    done = 0
    for batch_source, ids in _batches(pending, settings.POLL_BATCH_SIZE):
        result.add(poll_batch(batch_source, ids))
        done += len(ids)
        if progress is not None:
            progress(done, total)
        if deadline is not None and time.monotonic() > deadline and done < total:
            # The rest are the most recently polled; they head the next run.
            log.info("poll stopped after %s s; %d listing(s) wait", max_seconds, total - done)
            break
    return result


def _batches(pending: list[tuple[int, str]], size: int) -> Iterable[tuple[str, list[int]]]:
    """Batches of one source each, keeping the least-recently-polled order within a source."""
    by_source: dict[str, list[int]] = defaultdict(list)
    for listing_id, source in pending:
        by_source[source].append(listing_id)
    for source, ids in by_source.items():
        for start in range(0, len(ids), size):
            yield source, ids[start : start + size]


def poll_batch(source: str, ids: Sequence[int]) -> PollResult:
    """Fetch, record and judge one batch of listings of one source."""
    listings = list(Listing.objects.filter(id__in=ids, paused=False).order_by("id"))
    result = PollResult(listings=len(listings))
    if not listings:
        return result
    fetched = _fetch(source, [listing.item_code for listing in listings])

    now = timezone.now()
    points_by_listing = _recent_points([listing.pk for listing in listings], now)
    watches_by_listing = _live_watches([listing.pk for listing in listings])

    new_points: list[PricePoint] = []
    detections: list[Detection] = []
    missed: list[tuple[Watch, Observation]] = []
    seen: list[Listing] = []
    failed: list[Listing] = []
    described: list[Listing] = []
    for listing in listings:
        observation = _as_observation(listing, fetched.get(listing.item_code), now)
        if isinstance(observation, FetchError):
            result.errors += 1
            listing.last_error = f"{observation.kind}: {observation.detail}"[:200]
            listing.last_error_at = now
            listing.last_polled_at = now
            failed.append(listing)
            continue
        result.observations += 1
        # Only what came before this observation (a dispatcher may have written since).
        previous = [
            p
            for p in points_by_listing.get(listing.pk, ())
            if p.observed_at < observation.observed_at
        ]
        if _worth_writing(observation, previous):
            new_points.append(PricePoint.from_observation(listing, observation))
        seen.append(listing)
        if _remember(listing, observation):
            described.append(listing)
        past = [_point(p) for p in previous]
        # The pages sort and chart by these: kept current with every poll, from points
        # already in memory.
        listing.typical_price, listing.low_90 = stats(
            build_history([*past, _point(observation)], observation.observed_at)
        )
        watches = watches_by_listing.get(listing.pk)
        if watches:
            history = build_history(past, observation.observed_at)
            detections.extend(_judge(listing, observation, history, watches, missed))

    # Each group writes only the fields this run learned: staff may have edited the rest
    # (a name, units per pack, `paused`) while the batch was being fetched.
    with transaction.atomic():
        PricePoint.objects.bulk_create(new_points, batch_size=500)
        _update(
            seen,
            [
                "price",
                "shipping",
                "in_stock",
                "last_polled_at",
                "last_error",
                "typical_price",
                "low_90",
            ],
        )
        _update(failed, ["last_error", "last_error_at", "last_polled_at"])
        _update(described, list(_DESCRIPTIVE))
        result.enqueued = enqueue_many(detections, now=now)
        record_missed(missed)
    pagecache.prices_changed()
    result.points = len(new_points)
    return result


_OBSERVED = ("price", "shipping", "in_stock")


def _update(listings: list[Listing], fields: list[str]) -> None:
    if listings:
        Listing.objects.bulk_update(listings, fields, batch_size=500)


def _fetch(source: str, codes: list[str]) -> dict[str, FetchResult]:
    try:
        return get_marketplace(source).fetch(codes)
    except Exception as exc:  # a bug or misconfiguration in an adapter must not stop polling
        log.exception("marketplace %s failed", source)
        return {
            code: FetchError(FetchKind.BAD_RESPONSE, f"{type(exc).__name__}: {exc}"[:150])
            for code in codes
        }


def _as_observation(
    listing: Listing, result: FetchResult | None, now: dt.datetime
) -> Observation | FetchError:
    """`empty` is an observation too: the item is out of stock, at its last known price."""
    if result is None:
        return FetchError(FetchKind.BAD_RESPONSE, "the marketplace did not answer for this item")
    if isinstance(result, FetchError) and result.kind == FetchKind.EMPTY:
        return Observation(
            item_code=listing.item_code,
            price=listing.price,
            shipping=listing.shipping,
            in_stock=False,
            observed_at=now,
        )
    return result


def _recent_points(listing_ids: list[int], now: dt.datetime) -> dict[int, list[PricePoint]]:
    """The last 90 days of points of these listings, oldest first, in one query; a listing
    with none that recent gets its latest point alone (what "unchanged" compares with), in
    one more query."""
    fields = ("listing_id", "observed_at", "price", "shipping", "in_stock")
    by_listing: dict[int, list[PricePoint]] = defaultdict(list)
    recent = PricePoint.objects.filter(
        listing_id__in=listing_ids, observed_at__gte=now - LOW_WINDOW
    ).order_by("listing_id", "observed_at", "id")
    for point in recent.only(*fields):
        by_listing[point.listing_id].append(point)
    stale = [listing_id for listing_id in listing_ids if listing_id not in by_listing]
    if stale:
        latest_id = (
            PricePoint.objects.filter(listing_id=OuterRef("listing_id"))
            .order_by("-observed_at", "-id")
            .values("id")[:1]
        )
        latest = PricePoint.objects.filter(listing_id__in=stale, id=Subquery(latest_id))
        for point in latest.only(*fields):
            by_listing[point.listing_id].append(point)
    return by_listing


def _live_watches(listing_ids: list[int]) -> dict[int, list[Watch]]:
    """Live watches (not removed, not paused) of these listings, with their devices, in one
    query. Watches whose device cannot be reached are judged too: what they would have been
    told is kept on the watch (watches.missed), not enqueued."""
    by_listing: dict[int, list[Watch]] = defaultdict(list)
    watches = (
        Watch.live.filter(listing_id__in=listing_ids, paused=False)
        .select_related("device")
        .order_by("id")
    )
    for watch in watches:
        by_listing[watch.listing_id].append(watch)
    return by_listing


def _worth_writing(observation: Observation, previous: list[PricePoint]) -> bool:
    if not previous:
        return True
    last = previous[-1]
    changed = (last.price, last.shipping, last.in_stock) != (
        observation.price,
        observation.shipping,
        observation.in_stock,
    )
    quiet_for = observation.observed_at - last.observed_at
    return changed or quiet_for >= dt.timedelta(minutes=settings.POLL_HISTORY_MIN_MINUTES)


_DESCRIPTIVE = ("name", "shop_name", "url", "image_url")


def _remember(listing: Listing, observation: Observation) -> bool:
    """The listing's last-seen state. Descriptive fields only fill what is still empty, so
    staff's edits and a shop's renaming spree do not fight; True when one was filled."""
    listing.price = observation.price
    listing.shipping = observation.shipping
    listing.in_stock = observation.in_stock
    listing.last_polled_at = observation.observed_at
    listing.last_error = ""
    filled = False
    for field in _DESCRIPTIVE:
        value = getattr(observation, field)
        if value and not getattr(listing, field):
            setattr(listing, field, value)
            filled = True
    return filled


def _point(point: PricePoint | Observation) -> Point:
    return Point(point.observed_at, point.effective_price, point.in_stock)


def _judge(
    listing: Listing,
    observation: Observation,
    history: History,
    watches: list[Watch],
    missed: list[tuple[Watch, Observation]],
) -> list[Detection]:
    detections = []
    for watch in watches:
        judgement = detect(watch, listing.units_per_pack, observation, history)
        if judgement.holds and not watch.device.can_receive:
            # An outbox row could only be dropped `no_subscription`, poll after poll.
            missed.append((watch, observation))
        elif judgement.holds:
            payload = snapshot(watch, listing, observation, history, judgement)
            detections.append(Detection.for_watch(watch, observation.observed_at, payload))
    return detections


def snapshot(
    watch: Watch,
    listing: Listing,
    observation: Observation,
    history: History,
    judgement: Judgement,
) -> dict:
    """What the outbox row keeps of its detection (immutable): enough for staff to see why
    it fired and for the re-check to judge against."""
    return judgement.snapshot(
        {
            "trigger": watch.trigger,
            "price": observation.price,
            "shipping": observation.shipping,
            "effective_price": observation.effective_price,
            "in_stock": observation.in_stock,
            "typical": _num(history.typical),
            "low_90": history.low_90,
            "observed_at": observation.observed_at.isoformat(),
            "listing": listing.name or listing.item_code,
            "listing_id": listing.pk,
            "item_code": listing.item_code,
            "target_price": watch.target_price,
            "drop_percent": watch.drop_percent,
            "use_unit_price": watch.use_unit_price,
        }
    )


def _num(value) -> str | None:
    return None if value is None else str(value)
