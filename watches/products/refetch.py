"""The dispatcher's re-fetch of products: every shop's offer of a product, asked for in one
request per product and marketplace, however many outbox rows watch that product.

The answers are kept exactly as product polling keeps them (`watches.products.polling`: an
offer becomes or is a Listing of the product, an offer no longer answered is `empty`, and the
observation rule of `watches.polling.observations` writes history and last-seen state), and the
product's poll state moves as a poll's would — the marketplace's budget was spent once, for
both. Nothing here judges a watch: the outbox picks the best offer (`best_offer_now`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.utils import timezone

from watches.marketplaces.base import FetchError, FetchResult, Observation, Offers, Shape
from watches.models import Listing, OfferPage, Product
from watches.polling import inflight
from watches.polling.observations import fresh_observations, observe
from watches.products.offers import best_offer
from watches.products.polling import (
    fetch_offers,
    note_pages_read,
    offer_answers,
    offer_sources,
    save_poll_state,
)


@dataclass(frozen=True)
class ProductAnswer:
    """What the marketplaces said about one product's offers right now: each offer listing
    with its answer, and the error of a marketplace that could not answer (its offers are
    then not in `offers`)."""

    offers: tuple[tuple[Listing, FetchResult], ...] = ()
    errors: tuple[FetchError, ...] = ()
    # Some marketplace's part is observations already stored (a poll's, another process's),
    # not asked for now: as old as its oldest offer's observation (`observed_at`).
    reused: bool = False
    # The product's pack (one JAN code, one pack): what every offer is judged and told per,
    # whatever pack size an offer tracked by its own link before it joined was given.
    units_per_pack: int | None = None
    unit_label: str = ""

    def observed_at(self) -> dt.datetime | None:
        """When the oldest offer in the answer was observed (None: no offer observed)."""
        times = [r.observed_at for _, r in self.offers if isinstance(r, Observation)]
        return min(times, default=None)

    def best(
        self, *, after_points: bool = True, members: bool = False
    ) -> tuple[Listing, Observation] | None:
        """The cheapest offer in stock now (after points — the member-only ones too with
        `members` —, or by price incl. shipping where known), or None."""
        observed = [(listing, r) for listing, r in self.offers if isinstance(r, Observation)]
        chosen = best_offer(
            (result for _, result in observed), after_points=after_points, members=members
        )
        return next((pair for pair in observed if pair[1] is chosen), None)


def refetch_products(
    products: Iterable[Product],
    now: dt.datetime,
    *,
    fresh_within: dt.timedelta | None = None,
) -> dict[int, ProductAnswer]:
    """Ask every offer marketplace for the offers of `products` (one request per product and
    marketplace; no transaction open), keep the answers by the observation rule, and return
    them by product id.

    With `fresh_within`, as `watches.services.refetch_or_reuse` for listings: a product whose
    page of offers on a marketplace was read whole within that long of `now` (by a poll, or
    another dispatcher: `OfferPage`), every offer on it observed since, is not asked there
    again, its answer those observations as stored (`ProductAnswer.reused` names it); a page
    another process is asking (`watches.polling.inflight`, one unit with the listing
    re-check's of the same offers) is waited for, within the bound counted from this call's
    start, and its answer reused where it read the page whole."""
    started = time.monotonic()
    products = list(products)
    if not products:
        return {}
    offers: dict[int, list[tuple[Listing, FetchResult]]] = defaultdict(list)
    errors: dict[int, list[FetchError]] = defaultdict(list)
    reused: set[int] = set()
    for source in offer_sources():
        if fresh_within is None:
            _ask(source, products, offers, errors)
            continue
        since = now - fresh_within
        take_fresh = partial(_take_fresh, source, since=since, offers=offers, reused=reused)
        inflight.ask_once(
            take_fresh(products),
            partial(_unit, source),
            take_fresh,
            partial(_ask, source, offers=offers, errors=errors),
            fresh_within.total_seconds(),
            started,
        )
    return {
        product.pk: ProductAnswer(
            tuple(offers[product.pk]),
            tuple(errors[product.pk]),
            reused=product.pk in reused,
            units_per_pack=product.units_per_pack,
            unit_label=product.unit_label,
        )
        for product in products
    }


def _unit(source: str, product: Product) -> tuple[str, str, int]:
    # The unit `watches.polling.feeds.listing_units` gives a listing of the product's offers.
    return ("offers", source, product.pk)


def _ask(
    source: str,
    products: list[Product],
    offers: dict[int, list[tuple[Listing, FetchResult]]],
    errors: dict[int, list[FetchError]],
) -> None:
    """Ask `source` for the offers of `products` and keep the answers by the observation
    rule, with the products' poll state (a reused product's is the poll's, and is not
    written back over a later one): each offer's answer added to `offers`, the error of a
    product it could not answer to `errors`."""
    if not products:
        return
    fetched = fetch_offers(source, [product.jan for product in products])
    # Stamped when answered, as a poll's are: the budget or another process's mark may have
    # held the ask well after the re-check began.
    now = timezone.now()
    pairs = offer_answers(source, products, fetched, now)
    answered = set()
    for listing, result in pairs:
        assert listing.product_id is not None  # an offer of one of `products`
        offers[listing.product_id].append((listing, result))
        answered.add(listing.product_id)
    for product in products:
        answer = fetched[product.jan]
        if isinstance(answer, FetchError) and product.pk not in answered:
            errors[product.pk].append(answer)
    observations = observe(pairs, now, via=Shape.PRODUCT)
    with transaction.atomic():
        observations.save()
        save_poll_state(products)
        note_pages_read(source, products, fetched)


def _take_fresh(
    source: str,
    products: list[Product],
    since: dt.datetime,
    offers: dict[int, list[tuple[Listing, FetchResult]]],
    reused: set[int],
) -> list[Product]:
    """Take the products whose page of offers on `source` was read whole at or after `since`
    (`OfferPage`: any shop that began selling it is known) and whose every offer that page
    reaches was observed (not failed) since — their answer those observations, added to
    `offers` — and return the rest."""
    if not products:
        return []
    read = set(
        OfferPage.objects.filter(
            source=source, product__in=products, read_at__gte=since
        ).values_list("product_id", flat=True)
    )
    products_read = [product for product in products if product.pk in read]
    by_product: dict[int, list[Listing]] = defaultdict(list)
    for listing in Listing.objects.filter(
        source=source, product__in=products_read, paused=False, beyond_product_page=False
    ).order_by("id"):
        assert listing.product_id is not None
        by_product[listing.product_id].append(listing)
    # A campaign is judged ended by the moment of this read, not the call's start (a wait
    # on another process's mark may come between).
    fresh = fresh_observations(
        [listing for group in by_product.values() for listing in group],
        since,
        now=timezone.now(),
    )
    left = []
    for product in products:
        group = by_product.get(product.pk, [])
        if product.pk in read and all(listing.id in fresh for listing in group):
            offers[product.pk].extend((listing, fresh[listing.id]) for listing in group)
            reused.add(product.pk)
        else:
            left.append(product)
    return left


def offers_together(source: str, listings: Iterable[Listing]) -> dict[int, Observation]:
    """The answers a product's page of offers gives for listings of `source` that are offers
    of one product, two or more of them (the dispatcher's re-check of listing watches on
    several shops' offers): one request per product, cheapest first and in stock; an offer
    not on the page (sold out, or past a popular product's first page) is left for a
    request of its own. Only where the marketplace answers a product's offers."""
    by_jan: dict[str, dict[str, Listing]] = defaultdict(dict)
    for listing in listings:
        if listing.product_id is not None and listing.jan:
            by_jan[listing.jan][listing.item_code] = listing
    wanted = {jan: mine for jan, mine in by_jan.items() if len(mine) > 1}
    if not wanted or source not in offer_sources():
        return {}
    answers = fetch_offers(source, sorted(wanted))
    found: dict[int, Observation] = {}
    for jan, mine in wanted.items():
        answer = answers[jan]
        for offer in answer.offers if isinstance(answer, Offers) else ():
            known = mine.get(offer.item_code)
            if known is not None:
                found[known.id] = offer
    return found
