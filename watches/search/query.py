"""Finding listings: by name (Japanese or Latin, full- or half-width), by category, and the
"cheap right now" list."""

from __future__ import annotations

import operator
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.db import connection
from django.db.models import (
    Case,
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
    When,
)
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

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
    net: int  # eff less the points everyone gets now


def _net(prefix: str = "") -> ExpressionWrapper:
    """Price + known shipping − the points everyone gets now, of a listing (`prefix`: the
    relation to it): a campaign that has ended since the listing was seen counts what is
    left after it."""
    now = timezone.now()
    points_now = Case(
        When(
            **{f"{prefix}points_until__lte": now},
            then=Coalesce(F(f"{prefix}points_after"), Value(0)),
        ),
        default=F(f"{prefix}points"),
    )
    total = F(f"{prefix}price") + Coalesce(F(f"{prefix}shipping"), Value(0))
    return ExpressionWrapper(Greatest(total - points_now, Value(0)), output_field=IntegerField())


def with_effective_price(
    queryset: QuerySet[Listing],
) -> QuerySet[WithAnnotations[Listing, _Effective]]:
    """`eff`: the price incl. shipping; `net`: the price after the points everyone gets now."""
    return queryset.annotate(
        eff=ExpressionWrapper(
            F("price") + Coalesce(F("shipping"), Value(0)), output_field=IntegerField()
        ),
        net=_net(),
    )


def search(query: str = "", category: str = "") -> QuerySet[Listing]:
    """Active listings whose search text holds every word of `query` (folded the same way:
    hiragana finds katakana, full-width finds half-width, English finds the Japanese
    category, romaji finds the reading), in name order (the `listing_browse` index). A
    product is found when any of its active offers is, once: as the first of them that
    matches (the pages then show it as the product, priced by its cheapest offer,
    `watches.pages.results`)."""
    terms = query_terms(query)
    # The same match on the product's offers, by the words themselves: few rows.
    offers = Listing.objects.filter(product_id=OuterRef("product_id"), paused=False)
    for term in terms:
        offers = offers.filter(search_text__contains=term)
    listings = Listing.objects.filter(paused=False)
    if terms:
        listings = matching(listings, terms, connection.vendor)
    if category:
        listings = listings.filter(category=category)
        offers = offers.filter(category=category)
    first_match = offers.order_by("id").values("id")[:1]
    listings = listings.filter(Q(product__isnull=True) | Q(id=Subquery(first_match)))
    return listings.order_by("name", "id")


def search_results(query: str, category: str = "") -> SearchResults:
    """What the search page shows for `query`: the listings `search()` would find, but only
    the first SEARCH_CAP the index yields (found without finding the rest), in name order."""
    ids = first_matches(connection, query_terms(query), category, SEARCH_CAP + 1)
    listings = Listing.objects.filter(id__in=ids[:SEARCH_CAP]).order_by("name", "id")
    return SearchResults(listings, more=len(ids) > SEARCH_CAP, found=len(ids[:SEARCH_CAP]))


def cheap_now(limit: int = 10) -> list[Listing | Product]:
    """In stock, at or near the 90-day low after points; the biggest drops below the typical
    price after points first (without points, the two are the prices incl. shipping). A
    product counts once, by its cheapest offer in stock after points (as
    `watches.products.offers.rank` has it) against the lowest 90-day low and the lowest
    typical price among its offers: it is cheap only when no shop usually sells it for less.
    Listings that are no product's offer are judged on their own. Each item carries its
    `drop`."""
    # A listing whose statistics were not computed after points since it was saved reads
    # them incl. shipping (the same, without points).
    listings = (
        with_effective_price(
            Listing.objects.filter(product__isnull=True, paused=False, in_stock=True)
        )
        .annotate(
            low=Coalesce(F("low_90_net"), F("low_90")),
            typical=Coalesce(F("typical_net"), F("typical_price")),
        )
        .filter(low__isnull=False, typical__gt=0, net__lte=F("low") * NEAR_LOW)
        .annotate(drop=_drop(F("net"), F("typical")))
        .filter(drop__lt=0)
        .order_by("drop", "id")[:limit]
    )
    live = Q(offers__paused=False)
    products = (
        Product.objects.annotate(
            best=Min(
                _net("offers__"),
                filter=live & Q(offers__in_stock=True, offers__price__isnull=False),
                output_field=IntegerField(),
            ),
            low=Min(Coalesce(F("offers__low_90_net"), F("offers__low_90")), filter=live),
            typical=Min(
                Coalesce(F("offers__typical_net"), F("offers__typical_price")),
                filter=live & Q(offers__typical_price__gt=0),
            ),
        )
        .filter(best__lte=F("low") * NEAR_LOW)
        .annotate(drop=_drop(F("best"), F("typical")))
        .filter(drop__lt=0)
        .order_by("drop", "id")[:limit]
    )
    both: list[Listing | Product] = [*listings, *products]
    # Both querysets annotate `drop`.
    return sorted(both, key=operator.attrgetter("drop"))[:limit]


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
