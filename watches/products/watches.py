"""A device's watches on a product: "any shop at or below ¥X", "the cheapest N % below its
typical", "back in stock anywhere". Kept like listing watches (`watches.pages.watchlist`): one
live watch per device, product and trigger; choosing the same trigger again changes it."""

from __future__ import annotations

from django.db import transaction

from watches.models import Device, Listing, Product, Watch
from watches.pages import pagecache
from watches.pages.watchlist import WatchParams, save_watch
from watches.products.offers import best_offer


def offers_of(product: Product) -> list[Listing]:
    """The product's offers that are tracked (not paused), cheapest first where in stock."""
    return list(Listing.objects.filter(product=product, paused=False).order_by("id"))


def save_product_watch(device: Device, product: Product, params: WatchParams) -> tuple[Watch, bool]:
    """Watch `product` for `device` (`watches.pages.watchlist.save_watch`). Its `listing` starts at
    the best offer now (any offer when none is in stock). Returns (watch, created). Raises
    LookupError when the product has no offer to follow."""
    offers = offers_of(product)
    if not offers:
        raise LookupError(f"product {product.pk} has no offer")
    best = best_offer(offers, after_points=params.after_points)
    return save_watch(device, best or offers[0], params, product=product)


def describe_product(product: Product, *, units_per_pack: int | None, unit_label: str) -> None:
    """Set the product's pack size, and its offers' with it: every offer is the same pack,
    which each offer's own page prices per unit on (the product's pages, triggers and
    messages read the product's)."""
    product.units_per_pack, product.unit_label = units_per_pack, unit_label
    product.save(update_fields=["units_per_pack", "unit_label"])
    offers = Listing.objects.filter(product=product)
    offers.update(units_per_pack=units_per_pack, unit_label=unit_label)
    # Their pages show unit prices.
    ids = list(offers.values_list("pk", flat=True))
    transaction.on_commit(lambda: pagecache.listings_changed(ids))
