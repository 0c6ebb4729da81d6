"""The rows of a list of things to buy ("Cheap right now", a search, all listings): a listing
on its own, or a product once — named as the product, linked to its page, and priced by its
cheapest offer in stock (the "from" price: price plus shipping where known, less the points
everyone gets now, ranked as `watches.products.offers.rank` ranks offers) with that offer's
per-unit price on the product's pack."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from watches.models import Listing, Product
from watches.products.offers import (
    best_offer,
    in_stock,
    offers_by_product,
    on_products_pack,
    typical_price,
)


@dataclass(frozen=True)
class Row:
    listing: Listing  # what the row shows the picture and category of
    offer: Listing  # whose price it shows: the listing itself, or the product's best offer
    product: Product | None = None
    shops: int = 0  # shops that have the product in stock
    typical: int | None = None  # what the row's price is compared with

    @property
    def name(self) -> str:
        return (self.product.name if self.product else "") or self.listing.name

    @property
    def change_vs_typical(self) -> float | None:
        """Percent of the price shown above (+) or below (−) the typical price."""
        current = self.offer.net_price
        if current is None or not self.typical:
            return None
        return round((current - self.typical) * 100 / self.typical, 1)


def rows(*groups: Iterable[Listing | Product]) -> list[list[Row]]:
    """A row for each listing or product of each group, in order, with one query for the
    offers of every product in them all. A listing that is a product's offer stands for that
    product."""
    groups_ = [list(group) for group in groups]
    offers = offers_by_product(
        product_id for group in groups_ for item in group if (product_id := _product_id(item))
    )
    return [[row for item in group if (row := _row(item, offers)) is not None] for group in groups_]


def _product_id(item: Listing | Product) -> int | None:
    return item.pk if isinstance(item, Product) else item.product_id


def _row(item: Listing | Product, offers: dict[int, list[Listing]]) -> Row | None:
    product_id = _product_id(item)
    if product_id is None:
        assert isinstance(item, Listing)  # a product is its own product
        return Row(item, item, typical=item.typical_net or item.typical_price)
    tracked = offers.get(product_id, [])
    if not tracked:
        return None  # every offer was paused since the list was read
    best = best_offer(tracked)
    # No shop has it in stock: the listing the list found, at its last price.
    shown = best or (item if isinstance(item, Listing) else tracked[0])
    product = tracked[0].product
    assert product is not None  # loaded with its product
    return Row(
        listing=item if isinstance(item, Listing) else shown,
        offer=on_products_pack(shown, product),
        product=product,
        shops=len(in_stock(tracked)),
        typical=typical_price(tracked),
    )
