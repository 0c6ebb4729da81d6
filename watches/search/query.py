"""Finding listings: by name (Japanese or Latin, full- or half-width), by category, and the
"cheap right now" list."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.db import connection
from django.db.models import (
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from watches.models import Listing, Product
from watches.search.index import first_matches, matching
from watches.search.text import MAX_QUERY, query_terms
from watches.search.vocabulary import category_label

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

# "Near its 90-day low": within this share above it.
NEAR_LOW = 1.05
# A search counts its matches up to this many ("1000+" beyond), and its pages show the first
# this many the index yields, in name order: finding and sorting every one of 25,000 matches
# costs ten times as much, for pages nobody reads (decision 0013).
SEARCH_CAP = 1000


@dataclass(frozen=True)
class SearchResults:
    listings: QuerySet[Listing]  # at most SEARCH_CAP, in name order
    more: bool  # more than SEARCH_CAP listings match
    found: int = 0  # how many `listings` holds


def normalise(text: str) -> str:
    """The query as the page shows it back: NFKC (so 'ＢＯＳＳ' reads 'BOSS'), trimmed."""
    return unicodedata.normalize("NFKC", text).strip()[:MAX_QUERY]


class _Effective(TypedDict):
    eff: int  # price + shipping (0 where unknown)


def with_effective_price(
    queryset: QuerySet[Listing],
) -> QuerySet[WithAnnotations[Listing, _Effective]]:
    return queryset.annotate(
        eff=ExpressionWrapper(
            F("price") + Coalesce(F("shipping"), Value(0)), output_field=IntegerField()
        )
    )


def search(query: str = "", category: str = "") -> QuerySet[Listing]:
    """Active listings whose search text holds every word of `query` (folded the same way:
    hiragana finds katakana, full-width finds half-width, English finds the Japanese
    category, romaji finds the reading), in name order (the `listing_browse` index). A
    product's offers stand for it once: its first offer (the pages then show it priced by its
    cheapest offer, `watches.pages.results`)."""
    first_offer = (
        Listing.objects.filter(product_id=OuterRef("product_id"), paused=False)
        .order_by("id")
        .values("id")[:1]
    )
    listings = Listing.objects.filter(paused=False).filter(
        Q(product__isnull=True) | Q(id=Subquery(first_offer))
    )
    terms = query_terms(query)
    if terms:
        listings = matching(listings, terms, connection.vendor)
    if category:
        listings = listings.filter(category=category)
    return listings.order_by("name", "id")


def search_results(query: str, category: str = "") -> SearchResults:
    """What the search page shows for `query`: the listings `search()` would find, but only
    the first SEARCH_CAP the index yields (found without finding the rest), in name order."""
    ids = first_matches(connection, query_terms(query), category, SEARCH_CAP + 1)
    listings = Listing.objects.filter(id__in=ids[:SEARCH_CAP]).order_by("name", "id")
    return SearchResults(listings, more=len(ids) > SEARCH_CAP, found=len(ids[:SEARCH_CAP]))


def cheap_now(limit: int = 10) -> list[Listing | Product]:
    """In stock, at or near the 90-day low; the biggest drops below the typical price first.
    A product counts once, by its cheapest offer in stock (price plus known shipping, as
    `watches.products.offers.rank` has it) against the lowest 90-day low and the lowest typical
    price among its offers: it is cheap only when no shop usually sells it for less. Listings
    that are no product's offer are judged on their own. Each item carries its `drop`."""
    listings = (
        with_effective_price(
            Listing.objects.filter(
                product__isnull=True,
                paused=False,
                in_stock=True,
                low_90__isnull=False,
                typical_price__gt=0,
            )
        )
        .filter(eff__lte=F("low_90") * NEAR_LOW)
        .annotate(drop=_drop(F("eff"), F("typical_price")))
        .filter(drop__lt=0)
        .order_by("drop", "id")[:limit]
    )
    live = Q(offers__paused=False)
    offer_price = F("offers__price") + Coalesce(F("offers__shipping"), Value(0))
    products = (
        Product.objects.annotate(
            best=Min(
                offer_price,
                filter=live & Q(offers__in_stock=True, offers__price__isnull=False),
                output_field=IntegerField(),
            ),
            low=Min("offers__low_90", filter=live),
            typical=Min("offers__typical_price", filter=live & Q(offers__typical_price__gt=0)),
        )
        .filter(best__lte=F("low") * NEAR_LOW)
        .annotate(drop=_drop(F("best"), F("typical")))
        .filter(drop__lt=0)
        .order_by("drop", "id")[:limit]
    )
    both: list[Listing | Product] = [*listings, *products]
    return sorted(both, key=lambda item: item.drop)[:limit]


def _drop(price: F, typical: F) -> ExpressionWrapper:
    return ExpressionWrapper((price - typical) * 1.0 / typical, output_field=FloatField())


def categories() -> list[tuple[str, str]]:
    """(stored name, name in the reader's language) of every category with an active
    listing, in the reader's alphabetical order."""
    names = (
        Listing.objects.filter(paused=False)
        .exclude(category="")
        .order_by("category")
        .values_list("category", flat=True)
        .distinct()
    )
    return sorted(((name, category_label(name)) for name in names), key=lambda pair: pair[1])
