"""Product intake: from a JAN code (typed, or read by the phone's camera), a Yahoo! Shopping
item link, or a listing whose JAN code is known, to a Product with every shop's offer.

A known product is never fetched again here (polling keeps it fresh): typing codes must not
be a way to make us call a marketplace at will. A new one is asked of every marketplace that
answers by JAN code, once each, outside any transaction; its offers are kept by the same rule
as product polling. Every problem becomes an `IntakeError` whose message can be shown as is.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from watches.intake import IntakeError, ItemRef, find_or_add
from watches.marketplaces.base import FetchError, FetchKind, Offers, OffersResult
from watches.models import Listing, Product
from watches.pages import pagecache
from watches.polling.observations import observe
from watches.products.jan import InvalidJAN, normalise_jan
from watches.products.polling import (
    fetch_offers,
    note_pages_read,
    offer_answers,
    offer_sources,
)

log = logging.getLogger("watches.products.intake")

_JAN_PROBLEMS = {
    "empty": gettext_lazy("Enter the JAN code: the 13 (or 8) digits under the barcode."),
    "too_long": gettext_lazy("That is too long to be a JAN code."),
    "not_digits": gettext_lazy("A JAN code is digits only, such as 4901234567894."),
    "length": gettext_lazy("A JAN code has 13 or 8 digits."),
    "check_digit": gettext_lazy(
        "That JAN code's last digit does not match: check the digits again."
    ),
}


def parse_jan(text: object) -> str:
    """The JAN code typed, normalised. Raises IntakeError with what is wrong with it."""
    try:
        return normalise_jan(text)
    except InvalidJAN as error:
        raise IntakeError(str(_JAN_PROBLEMS[error.code]), code=f"jan_{error.code}") from None


def add_product(jan: str) -> Product:
    """The product with this (normalised) JAN code: the known one, or a new one made from
    every shop's offer of it. Listings already tracked with that JAN join it. Raises
    IntakeError when no marketplace here can answer, or none offers it."""
    product = Product.objects.filter(jan=jan).first()
    if product is None:
        product = _new_product(jan)
    adopt_listings(product)
    return product


def product_from_listing(listing: Listing) -> Product:
    """The product a listing is an offer of: its own, or the one its known JAN names."""
    if listing.product is not None:
        return listing.product
    if not listing.jan:
        raise IntakeError(
            _("We do not know this item's JAN code, so its other shops cannot be found."),
            code="no_jan",
        )
    return add_product(listing.jan)


def add_by_link(ref: ItemRef) -> Listing | Product:
    """An item (parsed from a link or code), as the home page's "add" takes it: the listing,
    or — for an item whose answer carries a valid JAN code (Yahoo! Shopping's do) — its
    product."""
    listing = find_or_add(ref)
    if listing.product is not None:
        return listing.product
    if listing.jan:
        try:
            return product_from_listing(listing)
        except IntakeError:
            log.info("listing %s: no product for JAN %s", listing.pk, listing.jan)
    return listing


def adopt_listings(product: Product) -> int:
    """Listings whose JAN code is known to be the product's, and that belong to no product
    yet, become its offers. Returns how many joined."""
    joining = Listing.objects.filter(jan=product.jan, product__isnull=True)
    ids = list(joining.values_list("pk", flat=True))
    joined = Listing.objects.filter(pk__in=ids, product__isnull=True).update(product=product)
    # Their pages link to the product now, and its page shows them.
    transaction.on_commit(lambda: pagecache.listings_changed(ids))
    transaction.on_commit(lambda: pagecache.products_changed([product.pk]))
    return joined


def _new_product(jan: str) -> Product:
    sources = offer_sources()
    if not sources:
        raise IntakeError(
            _("This Yasugoro has no marketplace that can look up JAN codes."), code="no_source"
        )
    answers: dict[str, OffersResult] = {
        source: fetch_offers(source, [jan])[jan] for source in sources
    }
    offers = [
        offer
        for answer in answers.values()
        if isinstance(answer, Offers)
        for offer in answer.offers
    ]
    if not offers:
        raise _no_offers(jan, list(answers.values()))
    cheapest = min(offers, key=lambda offer: offer.effective_price or 0)
    extra = next((o.extra for o in offers if (o.extra or {}).get("units_per_pack")), {}) or {}
    # What a marketplace says beside the offer is untyped (the demo's catalogue says these).
    units, label = extra.get("units_per_pack"), extra.get("unit_label")
    try:
        with transaction.atomic():
            product = Product.objects.create(
                jan=jan,
                name=cheapest.name[:500],
                image_url=cheapest.image_url,
                units_per_pack=units if isinstance(units, int) and units else None,
                unit_label=label if isinstance(label, str) else "",
            )
    except IntegrityError:  # someone added it at the same moment
        return Product.objects.get(jan=jan)
    now = timezone.now()
    for source, answer in answers.items():
        pairs = offer_answers(source, [product], {jan: answer}, now)
        with transaction.atomic():
            observe(pairs, now).save()
            note_pages_read(source, [product], {jan: answer})
    Product.objects.filter(pk=product.pk).update(last_polled_at=now, last_error=product.last_error)
    pk = product.pk
    transaction.on_commit(lambda: pagecache.products_changed([pk]))
    return product


def _no_offers(jan: str, answers: list[OffersResult]) -> IntakeError:
    errors = [a for a in answers if isinstance(a, FetchError)]
    if all(e.kind in (FetchKind.EMPTY, FetchKind.NOT_FOUND) for e in errors):
        return IntakeError(
            _("No shop offers JAN %(jan)s right now: check the code.") % {"jan": jan},
            code="not_found",
        )
    return IntakeError(
        _("The marketplaces could not be asked about JAN %(jan)s right now. Try again later.")
        % {"jan": jan},
        code="unreachable",
    )
