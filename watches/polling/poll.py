"""Price polling: look at the active listings that are due, keep their history, and enqueue what
their watches' triggers detect.

A run takes the due listings (not paused, not polled within half the interval) that the poll
plan chooses (`watches.polling.plan`: within the marketplace's budget, watched listings first by
priority, unwatched ones with what is left) in batches of one source, and for each batch:
1. fetches them through the marketplace adapter (network; no transaction open);
2. applies the observation rule of `watches.polling.observations` — the same the dispatcher's
   re-fetch follows — in memory: which answers become PricePoints (not when nothing changed
   and the last point is younger than POLL_HISTORY_MIN_MINUTES), the listings' last-seen
   state, typical price and 90-day low, or their error; this reads the batch's recent
   history in one query, and the live watches (not paused, not removed) with their devices
   in another;
3. per listing, builds its History once from the points *before* this observation, and judges
   every live watch with `watches.triggers.detect`;
4. in one short transaction: saves the observations and enqueues every detection through the
   bulk `outbox.enqueue.enqueue_many`, which folds a detection already enqueued today.

A marketplace error (an adapter's crash included) is recorded on the listing (`last_error`)
and counted; it never stops the run. Triggers are judged on observations only: an error tells
nothing about the price; `empty` is an observation, out of stock.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Min, Q, QuerySet
from django.utils import timezone

from common.bulk import update_by_id
from outbox.enqueue import Detection, detections_for, enqueue_many
from watches.marketplaces.base import FetchResult, Observation, Shape
from watches.missed import record_missed
from watches.models import Listing, Product, Watch
from watches.polling import feeds
from watches.polling.observations import Observations, fetch, observe
from watches.polling.plan import Planned, plan
from watches.triggers import History, Judgement, Point, build_history, detect

log = logging.getLogger("watches.polling.poll")

Progress = Callable[[int, int], None]


@dataclass
class PollResult:
    products: int = 0  # products asked for every shop's offer (one request each)
    listings: int = 0  # listings answered about (asked for, or found on a page)
    observations: int = 0  # answers with a price/stock (out of stock included)
    errors: int = 0  # answers that were an error (not found, unreachable…)
    enqueued: int = 0  # outbox rows really inserted (not folded into today's row)
    points: int = 0  # price points written
    requests: int = 0  # requests planned: one item, a shop's page or a product's offers each
    # The listings asked about, so that a forced run asks each once (`poll(skip=…)`).
    asked: set[int] = field(default_factory=set, repr=False)

    def as_json(self) -> dict[str, int]:
        return {
            "products": self.products,
            "listings": self.listings,
            "observations": self.observations,
            "errors": self.errors,
            "enqueued": self.enqueued,
        }

    def add(self, other: PollResult) -> None:
        for name in (
            "products",
            "listings",
            "observations",
            "errors",
            "enqueued",
            "points",
            "requests",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.asked |= other.asked


def due_listings(
    now: dt.datetime, *, source: str | None = None, force: bool = False
) -> QuerySet[Listing]:
    """Active listings due for polling, least recently polled first. Due means not polled
    for half the polling interval: a run that started a little late or took a while must not
    push a listing to the run after next. A re-fetch by the dispatcher counts as a poll, and
    so does an attempt that ended in an error — so a failing listing waits its turn instead
    of heading every run. (No index serves the order: the plan reads every due listing.)"""
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
    skip: Collection[int] = (),
) -> PollResult:
    """Poll the due listings (or exactly the listings with item `codes`, due or not; or
    every active listing of `source` with `force`), leaving out those in `skip` (already
    asked in this run, through their product). Starts no new batch once `max_seconds` have
    passed (the first batch always runs). Returns the counts."""
    now = now or timezone.now()
    if codes is not None:
        queryset = Listing.objects.filter(item_code__in=list(codes)).order_by("id")
        planned = [
            Planned(pk, listing_source, True, 0.0)
            for pk, listing_source in queryset.values_list("id", "source")
        ]
    else:
        # What the budget allows, by value (watches.polling.plan).
        due = due_listings(now, source=source, force=force)
        if skip:
            due = due.exclude(id__in=list(skip))
        planned = plan(due, now)
    total = len(planned)
    result = PollResult()
    started = time.monotonic()
    rest = list(planned)
    done = 0
    while rest:
        batch = _next_batch(rest, started, done, max_seconds)
        result.add(_run(batch))
        done += len(batch)
        if progress is not None:
            progress(done, total)
        if max_seconds is not None and time.monotonic() - started > max_seconds and rest:
            # The rest are worth least, or the most recently polled; they head the next run.
            log.info("poll stopped after %s s; %d request(s) wait", max_seconds, len(rest))
            break
    return result


def _next_batch(
    rest: list[Planned], started: float, done: int, max_seconds: float | None
) -> list[Planned]:
    """The next batch of the run, taken out of `rest`: the next in the plan's order — or,
    once the run's pace so far says it would not reach them before `max_seconds`, the
    requests of the quarter for the listings known longest ago. Worth least, they come last:
    cut with the rest, they would come last again next run, and those listings never come
    round. Asked within the time instead, the run still ends within `max_seconds` and one
    batch."""
    size = settings.POLL_BATCH_SIZE
    oldest = [request for request in rest if request.oldest]
    if max_seconds is not None and done and oldest:
        elapsed = time.monotonic() - started
        if elapsed + elapsed / done * len(oldest) >= max_seconds:
            batch = next(iter(_batches(oldest, size)))
            taken = {id(request) for request in batch}
            rest[:] = [request for request in rest if id(request) not in taken]
            return batch
    batch = next(iter(_batches(rest, size)))
    del rest[: len(batch)]
    return batch


def _batches(planned: list[Planned], size: int) -> Iterable[list[Planned]]:
    """The plan's requests in its order (most worth first), cut into batches of at most
    `size` requests of one source and one shape: a batch is judged when its last answer is
    in, so a product's request between two items must not hold the first item's detection
    until every item of the run has been asked."""
    batch: list[Planned] = []
    for request in planned:
        if batch and (
            len(batch) >= size
            or (request.source, request.shape) != (batch[0].source, batch[0].shape)
        ):
            yield batch
            batch = []
        batch.append(request)
    if batch:
        yield batch


def _run(batch: list[Planned]) -> PollResult:
    """One batch of requests of one source and shape (`_batches`)."""
    source, shape = batch[0].source, batch[0].shape
    if shape == Shape.SHOP:
        return feeds.poll_shops(source, [request.key for request in batch])
    if shape == Shape.PRODUCT:
        from watches.products.polling import poll_product_batch

        # Each request of these shapes names its product (or its listing): the plan's rule.
        products = [r.product_id for r in batch if r.product_id is not None]
        result = poll_product_batch(source, products)
        result.requests = len(batch)
        return result
    return poll_batch(source, [r.listing_id for r in batch if r.listing_id is not None])


def poll_batch(source: str, ids: Sequence[int]) -> PollResult:
    """Fetch, record and judge one batch of listings of one source, asking in the order of
    `ids` (the plan's)."""
    position = {listing_id: i for i, listing_id in enumerate(ids)}
    listings = sorted(
        Listing.objects.filter(id__in=ids, paused=False), key=lambda row: position[row.pk]
    )
    if not listings:
        return PollResult()
    fetched = fetch(source, [listing.item_code for listing in listings])
    answers = [(listing, fetched[listing.item_code]) for listing in listings]
    result = record_answers(answers, timezone.now())
    result.requests = len(listings)
    result.asked = {listing.pk for listing in listings}
    return result


def record_answers(
    answers: Sequence[tuple[Listing, FetchResult]], now: dt.datetime, via: Shape = Shape.ITEM
) -> PollResult:
    """Keep a batch of answers by the observation rule, judge the live watches of each
    listing on its new observation, and enqueue what they detect — in one short
    transaction. `via`: the shape of the requests that answered."""
    from watches.products.polling import judge_products

    result = PollResult(listings=len(answers))
    if not answers:
        return result
    observations = observe(answers, now, via=via)
    detections, missed = judge_listings(observations, result)
    # The product watches of the offers observed, on every offer of their products: a plan
    # that asks a product's offers one by one (one offer due, or a product of one shop)
    # would otherwise never judge them.
    products = Product.objects.filter(
        id__in={
            seen.listing.product_id
            for seen in observations.seen
            if seen.observation is not None and seen.listing.product_id is not None
        }
    ).order_by("id")
    fresh = {listing.pk: listing for listing, _ in answers}
    for_products, missed_products, moves = judge_products(products, now, fresh)
    with transaction.atomic():
        observations.save()
        result.enqueued = enqueue_many([*detections, *for_products], now=now)
        record_missed([*missed, *missed_products])
        update_by_id(Watch, ("listing",), moves)
    result.points = len(observations.points)
    return result


def judge_listings(
    observations: Observations, result: PollResult
) -> tuple[list[Detection], list[tuple[Watch, Observation]]]:
    """The detections of the listing watches of a batch's observations (judged on each
    listing's past), and what unreachable devices missed; counts the answers in `result`.
    A product's watches are judged on all its offers (`judge_products`), not here."""
    watches_by_listing = _live_watches([seen.listing.pk for seen in observations.seen])
    detections: list[Detection] = []
    missed: list[tuple[Watch, Observation]] = []
    for seen in observations.seen:
        if seen.observation is None:
            result.errors += 1
            continue
        result.observations += 1
        watches = watches_by_listing.get(seen.listing.pk)
        if watches:
            histories = _Histories(seen.past, seen.past_net, seen.observation.observed_at)
            detections.extend(_judge(seen.listing, seen.observation, histories, watches, missed))
    return detections, missed


def _live_watches(listing_ids: list[int]) -> dict[int, list[Watch]]:
    """Live listing watches (not removed, not paused) of these listings, with their devices,
    in one query. Watches whose device cannot be reached are judged too: what they would have
    been told is kept on the watch (watches.missed), not enqueued."""
    by_listing: dict[int, list[Watch]] = defaultdict(list)
    watches = (
        Watch.live.filter(listing_id__in=listing_ids, paused=False, product__isnull=True)
        .select_related("device")
        .order_by("id")
    )
    for watch in watches:
        by_listing[watch.listing_id].append(watch)
    return by_listing


class _Histories:
    """A listing's History as of `at`, incl. shipping and after points, each built once when
    a watch first needs it."""

    def __init__(self, past: Sequence[Point], past_net: Sequence[Point], at: dt.datetime) -> None:
        self._points = {False: past, True: past_net}
        self._at = at
        self._built: dict[bool, History] = {}

    def of(self, watch: Watch) -> History:
        after = watch.after_points
        if after not in self._built:
            self._built[after] = build_history(self._points[after], self._at)
        return self._built[after]


def _judge(
    listing: Listing,
    observation: Observation,
    histories: _Histories,
    watches: list[Watch],
    missed: list[tuple[Watch, Observation]],
) -> list[Detection]:
    detections = []
    for watch in watches:
        history = histories.of(watch)
        judgement = detect(
            watch,
            listing.units_per_pack,
            observation,
            history,
            members=watch.device.lyp_premium,
        )
        if judgement.holds and not watch.device.receiving_channels:
            # An outbox row could only be dropped `no_subscription`, poll after poll.
            missed.append((watch, observation))
        elif judgement.holds:
            payload = snapshot(watch, listing, observation, history, judgement)
            detections.extend(detections_for(watch, observation.observed_at, payload))
    return detections


def snapshot(
    watch: Watch,
    listing: Listing,
    observation: Observation,
    history: History,
    judgement: Judgement,
) -> dict:
    """What the outbox row keeps of its detection (immutable): enough for staff to see why
    it fired and for the re-check to judge against — the points too, and what the watch
    compared (`after_points`)."""
    return judgement.snapshot(
        {
            "trigger": watch.trigger,
            "price": observation.price,
            "shipping": observation.shipping,
            "effective_price": observation.effective_price,
            **points_facts(observation),
            "after_points": watch.after_points,
            "in_stock": observation.in_stock,
            **history_facts(history),
            "observed_at": observation.observed_at.isoformat(),
            "listing": listing.name or listing.item_code,
            "listing_id": listing.pk,
            "item_code": listing.item_code,
            "target_price": watch.target_price,
            "drop_percent": watch.drop_percent,
            "use_unit_price": watch.use_unit_price,
        }
    )


def history_facts(history: History) -> dict:
    """The line a detection was drawn against, as a snapshot keeps it: the message of a
    price drop names the typical price (`outbox.messages`)."""
    return {"typical": _num(history.typical), "low_90": history.low_90}


def points_facts(offer: Observation | Listing) -> dict:
    """An offer's points as a snapshot keeps them (`watches.points.as_facts` reads them)."""
    until = offer.points_until
    points = offer.points_now if isinstance(offer, Listing) else offer.points
    if isinstance(offer, Listing) and not offer.campaign_on:
        until = None
    return {
        "points": points,
        "points_until": until.isoformat() if until else None,
        "point_rate": offer.point_rate,
        "member_points": offer.member_points,
        "net_price": offer.net_price,
    }


def _num(value) -> str | None:
    return None if value is None else str(value)
