"""Product polling: every shop's offer of a product in one request per product, from each
marketplace that can answer by JAN code (Yahoo! Shopping, the demo market), and the product
watches judged on the best offer.

A run takes products not asked about for half the polling interval (or all with `force`),
in batches, and for each batch and marketplace:
1. asks for the offers of every product's JAN code (network; no transaction open);
2. turns each answer into one answer per offer listing, for the observation rule of
   `watches.polling.observations` — the same as price polling and the dispatcher's re-fetch:
   an offer becomes (or already is) a Listing of that marketplace belonging to the product; an offer
   the product had there and the answer no longer holds is `empty` (out of stock); `empty`
   for the whole product is `empty` for each of its offers there; any other error is kept on
   the product (`last_error`) and tells nothing about its offers;
3. judges every live product watch (`watches.products.triggers`) on all the product's offers
   (other marketplaces' at their last-seen state), against the product's cheapest-offer
   history before this moment;
4. in one short transaction: saves the observations, the products' poll state, enqueues the
   detections through `outbox.enqueue.enqueue_many` (key: watch, trigger, day, channel), keeps
   what unreachable devices missed, and points each product watch's `listing` at the best
   offer now — the offer the dispatcher re-fetches and names.

Listing polling runs after it in the same task: offers just observed are not due again.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from common.bulk import update_by_id
from common.fields import max_length
from common.text import clip
from outbox.enqueue import Detection, detections_for, enqueue_many
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    Offers,
    OffersResult,
    Shape,
    get_marketplace,
)
from watches.missed import record_missed
from watches.models import Listing, OfferPage, Product, Watch
from watches.pages import pagecache
from watches.polling.observations import ask, observe
from watches.polling.poll import PollResult, history_facts, judge_listings, points_facts
from watches.products.offers import product_points
from watches.products.triggers import detect_best
from watches.triggers import LOW_WINDOW, History, Judgement, build_history

log = logging.getLogger("watches.products.polling")

GONE = "no longer offered"
_ERROR_LIMIT = max_length(Product, "last_error")


def offer_sources() -> list[str]:
    """The configured marketplaces that answer every shop's offer of a JAN code."""
    sources = []
    for source in settings.MARKETPLACE_ADAPTERS:
        try:
            if callable(getattr(get_marketplace(source), "offers", None)):
                sources.append(source)
        except Exception:  # a misconfigured adapter is the listing poller's to report
            log.exception("marketplace %s could not be made", source)
    return sources


def fetch_offers(source: str, jans: Sequence[str]) -> dict[str, OffersResult]:
    """Every shop's offer of each JAN code from `source`'s adapter (`observations.ask`: never
    raises; an adapter's failure, or a code it left unanswered, is `bad_response`; a halted
    marketplace is not asked)."""
    return ask(
        source,
        jans,
        lambda adapter, some: adapter.offers(some),
        "the marketplace did not answer for this JAN",
    )


def due_products(now: dt.datetime, *, force: bool = False) -> QuerySet[Product]:
    """Products not asked about for half the polling interval, least recently first."""
    queryset = Product.objects.all()
    if not force:
        cutoff = now - dt.timedelta(minutes=settings.POLL_MINUTES) / 2
        queryset = queryset.filter(Q(last_polled_at__isnull=True) | Q(last_polled_at__lte=cutoff))
    return queryset.order_by(F("last_polled_at").asc(nulls_first=True), "id")


def poll_products(
    *,
    jans: Sequence[str] | None = None,
    force: bool = False,
    now: dt.datetime | None = None,
    planned: bool = False,
) -> PollResult:
    """Poll the due products (or exactly those with `jans`) on every offer marketplace. With
    `planned` (a polling run), only on those without a budget (the demo): the poll plan asks
    a marketplace with one for products within that budget, beside its items and shops
    (`watches.polling.plan`)."""
    from watches.polling.plan import run_budget

    now = now or timezone.now()
    if jans is not None:
        queryset = Product.objects.filter(jan__in=list(jans)).order_by("id")
    else:
        queryset = due_products(now, force=force)
    sources = offer_sources()
    if planned:
        sources = [source for source in sources if run_budget(source) is None]
    ids = list(queryset.values_list("id", flat=True))
    result = PollResult()
    for source in sources:
        for start in range(0, len(ids), settings.POLL_BATCH_SIZE):
            result.add(poll_product_batch(source, ids[start : start + settings.POLL_BATCH_SIZE]))
    return result


@dataclass(frozen=True)
class _Missed:
    effective_price: int | None
    net_price: int | None
    observed_at: dt.datetime


def poll_product_batch(source: str, ids: Sequence[int]) -> PollResult:
    """Fetch, record and judge one batch of products on one marketplace."""
    products = list(Product.objects.filter(id__in=ids).order_by("id"))
    result = PollResult()
    if not products:
        return result
    answers = fetch_offers(source, [product.jan for product in products])
    now = timezone.now()
    pairs = offer_answers(source, products, answers, now)
    result.listings = len(pairs)
    result.asked = {listing.pk for listing, _ in pairs}
    result.products = len(products)
    observations = observe(pairs, now, via=Shape.PRODUCT)
    # Each offer's own watches, as polling judges a listing; then the product's, on them all.
    detections, missed = judge_listings(observations, result)
    fresh = {listing.pk: listing for listing, _ in pairs}
    for_products, missed_products, moves = judge_products(products, now, fresh)
    with transaction.atomic():
        observations.save()
        save_poll_state(products)
        note_pages_read(source, products, answers)
        result.enqueued = enqueue_many([*detections, *for_products], now=now)
        record_missed([*missed, *missed_products])
        update_by_id(Watch, ("listing",), moves)
    result.points = len(observations.points)
    return result


def save_poll_state(products: Iterable[Product]) -> None:
    """Write each product's poll state (when asked, and the error an answer left) as
    `offer_answers` set it in memory — unless a later ask's is stored already (a poll that
    answered while a re-check waited for the budget)."""
    products = list(products)
    update_by_id(
        Product,
        ("last_polled_at", "last_error"),
        ((p.pk, (p.last_polled_at, p.last_error)) for p in products),
        unless_later="last_polled_at",
    )
    # Their pages say when every shop was last asked.
    ids = [p.pk for p in products]
    transaction.on_commit(lambda: pagecache.products_changed(ids))


def note_pages_read(
    source: str, products: Iterable[Product], answers: Mapping[str, OffersResult]
) -> None:
    """Record that `source`'s page of offers of each of `products` it answered was read whole
    when the marketplace answered it (`OfferPage`), with the observations `offer_answers`
    gave, in their transaction — never moving a later read's moment back."""
    read = {
        product.pk: answer.observed_at
        for product in products
        if isinstance(answer := answers[product.jan], Offers)
    }
    if not read:
        return
    stored = dict(
        OfferPage.objects.filter(source=source, product_id__in=list(read)).values_list(
            "product_id", "pk"
        )
    )
    update_by_id(
        OfferPage,
        ("read_at",),
        [(pk, (read[product_id],)) for product_id, pk in stored.items()],
        unless_later="read_at",
    )
    # A page another process recorded first since the read above keeps its moment (one
    # request more, at worst, for the next re-check that finds it older).
    OfferPage.objects.bulk_create(
        [
            OfferPage(product_id=pk, source=source, read_at=at)
            for pk, at in read.items()
            if pk not in stored
        ],
        ignore_conflicts=True,
    )


def offer_answers(
    source: str,
    products: list[Product],
    answers: dict[str, OffersResult],
    now: dt.datetime,
) -> list[tuple[Listing, FetchResult]]:
    """One answer per offer listing of the batch (new offers become listings)."""
    known: dict[int, dict[str, Listing]] = defaultdict(dict)
    for listing in Listing.objects.filter(
        source=source, product__in=products, paused=False
    ).order_by("id"):
        assert listing.product_id is not None  # one of `products`' offers
        known[listing.product_id][listing.item_code] = listing
    pairs: list[tuple[Listing, FetchResult]] = []
    # The offers whose product page now reaches them, or no longer does (where that changed).
    reach: dict[bool, list[int]] = {True: [], False: []}
    for product in products:
        answer = answers[product.jan]
        product.last_polled_at = now
        if isinstance(answer, FetchError) and answer.kind != FetchKind.EMPTY:
            product.last_error = clip(f"{source} {answer.kind}: {answer.detail}", _ERROR_LIMIT)
            continue
        product.last_error = ""
        mine = known.get(product.pk, {})
        for offer in answer.offers if isinstance(answer, Offers) else ():
            offered = mine.pop(offer.item_code, None) or offer_listing(source, product, offer)
            if offered.beyond_product_page:
                reach[False].append(offered.pk)
            if not offered.paused:
                pairs.append((offered, offer))
        if isinstance(answer, Offers) and not answer.complete:
            # More offers than the page holds (cheapest first): one missing from it may be in
            # stock at a higher price. Not answered for: each is asked for alone.
            reach[True] += [o.pk for o in mine.values() if not o.beyond_product_page]
            continue
        if isinstance(answer, Offers):  # the whole of it: what it lacks is gone
            reach[False] += [o.pk for o in mine.values() if o.beyond_product_page]
        gone = FetchError(FetchKind.EMPTY, GONE) if isinstance(answer, Offers) else answer
        pairs.extend((listing, gone) for listing in mine.values())
    for beyond, ids in reach.items():
        if ids:
            Listing.objects.filter(pk__in=ids).update(beyond_product_page=beyond)
    return pairs


def offer_listing(source: str, product: Product, offer: Observation) -> Listing:
    """The listing of `offer`, made an offer of `product`: created from the offer when new;
    a listing already tracked (added by its link) joins the product when it had none."""
    listing, created = Listing.objects.get_or_create(
        source=source,
        item_code=offer.item_code,
        defaults={
            "product": product,
            "jan": product.jan,
            "name": offer.name[:500] or product.name,
            "shop_name": offer.shop_name[:200],
            "url": offer.url,
            "image_url": offer.image_url,
            "units_per_pack": product.units_per_pack,
            "unit_label": product.unit_label,
            "category": (offer.extra or {}).get("category") or "",
        },
    )
    if not created and listing.product_id is None:
        Listing.objects.filter(pk=listing.pk, product__isnull=True).update(
            product=product, jan=product.jan
        )
        # Its page links to the product now, and the product's page shows it.
        pk = listing.pk
        transaction.on_commit(lambda: pagecache.listings_changed([pk]))
        transaction.on_commit(lambda: pagecache.products_changed([product.pk]))
        listing.product, listing.jan = product, product.jan
    return listing


def judge_products(
    products: Iterable[Product], now: dt.datetime, fresh: Mapping[int, Listing]
) -> tuple[list[Detection], list[tuple[Watch, _Missed]], list[tuple[int, tuple[int]]]]:
    """Judge the live product watches of `products` on their offers as they are now: the
    listings this batch observed as it left them in memory (`fresh`, by id, not saved yet),
    the others as the database has them."""
    by_id = {product.pk: product for product in products}
    watches = list(
        Watch.live.filter(product_id__in=list(by_id), paused=False)
        .select_related("device")
        .order_by("id")
    )
    if not watches:
        return [], [], []
    offers: dict[int, list[Listing]] = defaultdict(list)
    for listing in Listing.objects.filter(product_id__in=list(by_id), paused=False):
        assert listing.product_id is not None  # an offer of one of `products`
        offers[listing.product_id].append(fresh.get(listing.pk, listing))
    histories: dict[bool, dict[int, History]] = {}

    def history(product_id: int, after_points: bool) -> History:
        # Each way (incl. shipping, after points) read once for the batch, when a watch
        # first needs it.
        if after_points not in histories:
            histories[after_points] = {
                pk: build_history(points, now)
                for pk, points in product_points(
                    list(by_id),
                    now - LOW_WINDOW,
                    before=now,
                    after_points=after_points,
                    tracked=True,
                ).items()
            }
        return histories[after_points][product_id]

    detections: list[Detection] = []
    missed: list[tuple[Watch, _Missed]] = []
    moves: list[tuple[int, tuple[int]]] = []
    for watch in watches:
        assert watch.product_id is not None  # a watch on one of `products`
        product = by_id[watch.product_id]
        judgement, best = detect_best(
            watch,
            product.units_per_pack,
            offers[product.pk],
            history(product.pk, watch.after_points),
            members=watch.device.lyp_premium,
        )
        if best is not None and best.pk != watch.listing_id:
            moves.append((watch.pk, (best.pk,)))
        if not judgement.holds:
            continue
        assert best is not None  # a judgement holds only on an offer in stock
        if not watch.device.receiving_channels:
            # An outbox row could only be dropped `no_subscription`, poll after poll.
            missed.append((watch, _Missed(best.effective_price, best.net_price, now)))
            continue
        line_history = history(product.pk, watch.after_points)
        payload = snapshot(watch, product, best, offers[product.pk], line_history, judgement, now)
        # One row per channel that reaches the device (push, e-mail or both), as for listings.
        detections.extend(detections_for(watch, now, payload))
    return detections, missed, moves


def snapshot(
    watch: Watch,
    product: Product,
    best: Listing,
    offers: list[Listing],
    history: History,
    judgement: Judgement,
    now: dt.datetime,
) -> dict:
    """What the outbox row keeps of a product detection: the product, the best offer then
    (shop, price, shipping, points, link), how many shops had it, and the product's typical
    price and 90-day low as a listing's snapshot keeps them."""
    return judgement.snapshot(
        {
            "trigger": watch.trigger,
            "product_id": product.pk,
            "jan": product.jan,
            "listing": product.name or product.jan,
            "listing_id": best.pk,
            "item_code": best.item_code,
            "shop": best.shop_name,
            "url": best.url,
            "price": best.price,
            "shipping": best.shipping,
            "effective_price": best.effective_price,
            **points_facts(best),
            "after_points": watch.after_points,
            "in_stock": True,
            "shops_in_stock": sum(1 for offer in offers if offer.in_stock),
            **history_facts(history),
            "observed_at": now.isoformat(),
            "target_price": watch.target_price,
            "drop_percent": watch.drop_percent,
            "use_unit_price": watch.use_unit_price,
        }
    )
