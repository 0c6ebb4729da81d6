"""The built-in demo marketplace: its catalogue is the DemoProduct table, edited in admin or
with `manage.py demo_market`, so anyone can move a price and see the outbox react."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from demo.models import DemoProduct
from watches.marketplaces.base import FetchError, FetchKind, FetchResult, Observation

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
            elif product.fault:
                results[code] = FetchError(
                    FetchKind(product.fault),
                    f"simulated {product.fault}",
                    retry_after=_FAULT_RETRY_AFTER.get(product.fault),
                )
            else:
                results[code] = Observation(
                    item_code=code,
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
                    },
                )
        return results
