"""The built-in demo marketplace: its catalogue is the DemoProduct table, edited in admin or
with `manage.py demo_market`, so anyone can move a price and see the outbox react."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from demo.models import DemoProduct
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    Offers,
    OffersResult,
)

# A simulated fault answers like a real outage of that kind would.
_FAULT_RETRY_AFTER = {DemoProduct.Fault.RATE_LIMITED: 60.0}


class DemoMarketplace:
    source = "demo"

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        codes = list(dict.fromkeys(item_codes))
        products = {p.item_code: p for p in DemoProduct.objects.filter(item_code__in=codes)}
        now = timezone.now()
        results: dict[str, FetchResult] = {}
        for code in codes:
            product = products.get(code)
            if product is None:
                results[code] = FetchError(FetchKind.NOT_FOUND, f"no demo product {code}")
            else:
                results[code] = _fault(product) or _observation(product, now)
        return results

    def offers(self, jans: Iterable[str]) -> dict[str, OffersResult]:
        """Every demo shop's offer of each JAN code, in one query; a simulated fault on any
        of them answers for the whole product, as a real outage of that request would."""
        jans = list(dict.fromkeys(jans))
        by_jan: dict[str, list[DemoProduct]] = {jan: [] for jan in jans}
        for product in DemoProduct.objects.filter(jan__in=jans).order_by("price", "id"):
            by_jan[product.jan].append(product)
        now = timezone.now()
        results: dict[str, OffersResult] = {}
        for jan, products in by_jan.items():
            fault = next((f for f in map(_fault, products) if f is not None), None)
            if fault is not None:
                results[jan] = fault
            elif not products:
                results[jan] = FetchError(FetchKind.EMPTY, f"no demo shop offers {jan}")
            else:
                offers = tuple(_observation(product, now) for product in products)
                results[jan] = Offers(jan=jan, offers=offers, observed_at=now)
        return results


def _fault(product: DemoProduct) -> FetchError | None:
    if not product.fault:
        return None
    return FetchError(
        FetchKind(product.fault),
        f"simulated {product.fault}",
        retry_after=_FAULT_RETRY_AFTER.get(product.fault),
    )


def _observation(product: DemoProduct, now) -> Observation:
    return Observation(
        item_code=product.item_code,
        price=product.price,
        shipping=product.shipping,
        in_stock=product.in_stock,
        observed_at=now,
        name=product.name,
        image_url=product.image_url,
        shop_name=product.shop_name,
        extra={
            "category": product.category,
            "units_per_pack": product.units_per_pack,
            "unit_label": product.unit_label,
            "jan": product.jan,
        },
    )
