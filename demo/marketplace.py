"""The built-in demo marketplace: its catalogue is the DemoProduct table, edited in admin or
with `manage.py demo_market`, so anyone can move a price and see the outbox react."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from common.lookups import one_of
from demo.models import DemoProduct
from watches.marketplaces.base import (
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    Offers,
    OffersResult,
)
from watches.points import holds, rakuten_points

# A simulated fault answers like a real outage of that kind would.
_FAULT_RETRY_AFTER = {DemoProduct.Fault.RATE_LIMITED: 60.0}
# What an answer tells, read as named tuples (`_read`).
_ANSWERED = (
    "item_code",
    "jan",
    "name",
    "shop_name",
    "category",
    "image_url",
    "units_per_pack",
    "unit_label",
    "price",
    "shipping",
    "in_stock",
    "fault",
    "point_rate",
    "points_from",
    "points_until",
    "member_rate",
)


class DemoMarketplace:
    source = "demo"

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        codes = list(dict.fromkeys(item_codes))
        products = {p.item_code: p for p in _read("item_code", codes)}
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
        by_jan: dict[str, list[Any]] = {jan: [] for jan in jans}
        for product in _read("jan", jans, order_by=("price", "id")):
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


def _read(column: str, values: list[str], order_by: tuple[str, ...] = ()) -> list[Any]:
    """The demo products whose `column` is one of `values`, as `_ANSWERED` rows."""
    if not values:
        return []
    rows = DemoProduct.objects.filter(one_of(column, values)).order_by(*order_by)
    return list(rows.values_list(*_ANSWERED, named=True))


def _fault(product: Any) -> FetchError | None:
    """`product`: a row of `_ANSWERED`."""
    if not product.fault:
        return None
    return FetchError(
        FetchKind(product.fault),
        f"simulated {product.fault}",
        retry_after=_FAULT_RETRY_AFTER.get(product.fault),
    )


def points_of(product: Any, now: dt.datetime) -> dict[str, Any]:
    """A demo product's points at `now`, as Observation fields: Rakuten Ichiba's rule
    (`watches.points.rakuten_points`) with its campaign while the window holds, and its
    premium members' extra. `product`: a DemoProduct or a row of `_ANSWERED`."""
    price = product.price
    standard = rakuten_points(price, 1)
    on = product.point_rate > 1 and holds(product.points_from, product.points_until, now)
    fields: dict[str, Any] = {
        "points": rakuten_points(price, product.point_rate) if on else standard,
        "member_points": rakuten_points(price, product.member_rate),
    }
    if on:
        fields["point_rate"] = product.point_rate
        if product.points_until is not None:
            fields["points_until"] = product.points_until
            fields["points_after"] = standard
    return fields


def _observation(product: Any, now) -> Observation:
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
        **points_of(product, now),
    )
