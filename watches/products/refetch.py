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
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from watches.marketplaces.base import FetchError, FetchResult, Observation, Offers
from watches.models import Listing, Product
from watches.polling.observations import observe
from watches.products.offers import best_offer
from watches.products.polling import fetch_offers, offer_answers, offer_sources, save_poll_state


@dataclass(frozen=True)
class ProductAnswer:
    """What the marketplaces said about one product's offers right now: each offer listing
    with its answer, and the error of a marketplace that could not answer (its offers are
    then not in `offers`)."""

    offers: tuple[tuple[Listing, FetchResult], ...] = ()
    errors: tuple[FetchError, ...] = ()

    def best(self, *, after_points: bool = True) -> tuple[Listing, Observation] | None:
        """The cheapest offer in stock now (after points, or by price incl. shipping where
        known), or None."""
        observed = [(listing, r) for listing, r in self.offers if isinstance(r, Observation)]
        chosen = best_offer((result for _, result in observed), after_points=after_points)
        return next((pair for pair in observed if pair[1] is chosen), None)


def refetch_products(products: Iterable[Product], now: dt.datetime) -> dict[int, ProductAnswer]:
    """Ask every offer marketplace for the offers of `products` (one request per product and
    marketplace; no transaction open), keep the answers by the observation rule, and return
    them by product id."""
    products = list(products)
    if not products:
        return {}
    jans = [product.jan for product in products]
    offers: dict[int, list[tuple[Listing, FetchResult]]] = defaultdict(list)
    errors: dict[int, list[FetchError]] = defaultdict(list)
    all_pairs: list[tuple[Listing, FetchResult]] = []
    for source in offer_sources():
        fetched = fetch_offers(source, jans)
        pairs = offer_answers(source, products, fetched, now)
        all_pairs.extend(pairs)
        answered = set()
        for listing, result in pairs:
            assert listing.product_id is not None  # an offer of one of `products`
            offers[listing.product_id].append((listing, result))
            answered.add(listing.product_id)
        for product in products:
            answer = fetched[product.jan]
            if isinstance(answer, FetchError) and product.pk not in answered:
                errors[product.pk].append(answer)
    observations = observe(all_pairs, now)
    with transaction.atomic():
        observations.save()
        save_poll_state(products)
    return {
        product.pk: ProductAnswer(tuple(offers[product.pk]), tuple(errors[product.pk]))
        for product in products
    }


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
