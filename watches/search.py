"""Finding listings: by name (Japanese or Latin, full- or half-width), by category, and the
"cheap right now" list."""

from __future__ import annotations

import unicodedata

from django.db.models import ExpressionWrapper, F, FloatField, IntegerField, QuerySet, Value
from django.db.models.functions import Coalesce

from watches.models import Listing

# "Near its 90-day low": within this share above it.
NEAR_LOW = 1.05
MAX_QUERY = 100


def normalise(text: str) -> str:
    """NFKC folds full-width Latin and half-width katakana into their usual forms, so
    'ＢＯＳＳ' finds 'BOSS' and 'ｺｰﾋｰ' finds 'コーヒー'."""
    return unicodedata.normalize("NFKC", text).strip()[:MAX_QUERY]


def with_effective_price(queryset: QuerySet[Listing]) -> QuerySet[Listing]:
    return queryset.annotate(
        eff=ExpressionWrapper(
            F("price") + Coalesce(F("shipping"), Value(0)), output_field=IntegerField()
        )
    )


def search(query: str = "", category: str = "") -> QuerySet[Listing]:
    listings = Listing.objects.filter(paused=False)
    for term in normalise(query).split():
        listings = listings.filter(name__icontains=term)
    if category:
        listings = listings.filter(category=category)
    return listings.order_by("name", "id")


def cheap_now(limit: int = 10) -> QuerySet[Listing]:
    """In stock, at or near the 90-day low; the biggest drops below the typical price first."""
    return (
        with_effective_price(
            Listing.objects.filter(
                paused=False, in_stock=True, low_90__isnull=False, typical_price__gt=0
            )
        )
        .filter(eff__lte=F("low_90") * NEAR_LOW)
        .annotate(
            drop=ExpressionWrapper(
                (F("eff") - F("typical_price")) * 1.0 / F("typical_price"),
                output_field=FloatField(),
            )
        )
        .filter(drop__lt=0)
        .order_by("drop", "id")[:limit]
    )


def categories() -> list[str]:
    return list(
        Listing.objects.filter(paused=False)
        .exclude(category="")
        .order_by("category")
        .values_list("category", flat=True)
        .distinct()
    )
