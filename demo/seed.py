"""A fresh demo: the catalogue as demo products and listings with 90 days of plausible price
history, and a demo watcher, so a new `make run` has something to look at and to notify."""

from __future__ import annotations

import datetime as dt
import hashlib
import random

from django.db import transaction
from django.utils import timezone

from demo.catalogue import CAMPAIGNS, CATALOGUE, MEMBER_RATES, DemoItem
from demo.marketplace import points_of
from demo.models import DemoProduct
from watches.models import Channel, Device, Listing, PricePoint, Product, Trigger, Watch
from watches.polling.history import refresh_stats


def _history(
    item: DemoItem, now: dt.datetime, *, on_sale: bool = False
) -> list[tuple[dt.datetime, int, bool]]:
    """90 days of a plausible price: small wobbles, a sale now and then, rare stock-outs.
    Deterministic per item, so seeding twice writes the same history. `on_sale` ends it with
    a day at the 90-day low, so a fresh demo has something "cheap right now"."""
    rng = random.Random(hashlib.sha256(item.code.encode()).digest())
    points = []
    price = item.price
    start = now - dt.timedelta(days=90)
    steps = 90 * 3  # every 8 hours
    for step in range(steps):
        at = start + dt.timedelta(hours=8 * step)
        roll = rng.random()
        if roll < 0.04:
            price = round(item.price * rng.uniform(0.72, 0.88))  # a sale
        elif roll < 0.12:
            price = item.price  # back to list price
        else:
            # Wobbles compound: kept within the band the demo tick walks in (72-110 % of the
            # list price), so a seeded price is one the tick could have made.
            wobbled = round(price * rng.uniform(0.985, 1.015))
            price = min(max(wobbled, round(item.price * 0.72)), round(item.price * 1.1))
        in_stock = rng.random() > 0.02
        points.append((at, price, in_stock))
    if on_sale:
        low = min(price for _, price, ok in points if ok)
        points[-3:] = [(at, low, True) for at, _, _ in points[-3:]]
    # The current price and stock are where the history ends.
    points[-1] = (points[-1][0], points[-1][1], True)
    return points


@transaction.atomic
def seed_demo(now: dt.datetime | None = None) -> dict[str, int]:
    """Load the demo catalogue, its listings with 90 days of history, and a demo watcher whose
    notifications go to the console. Idempotent: running it again adds nothing.

    Returns what it created: `listings` (one per demo shop's item), `products` (JAN codes
    sold by several demo shops), `demo_items` (the demo marketplace's own catalogue rows, one
    per listing), `price_points` and `watches`."""
    now = now or timezone.now()
    created = {"listings": 0, "products": 0, "demo_items": 0, "price_points": 0, "watches": 0}
    jans = {item.jan for item in CATALOGUE if item.jan}
    products_before = Product.objects.filter(jan__in=jans).count()
    first_shops = [item.code for item in CATALOGUE if item.shop == DemoItem.shop]
    for item in CATALOGUE:
        # Every fourth item of the first shop ends its history on sale; other shops' offers
        # of it wander on their own.
        on_sale = item.code in first_shops and first_shops.index(item.code) % 4 == 0
        history = _history(item, now, on_sale=on_sale)
        product, made = DemoProduct.objects.get_or_create(
            item_code=item.code,
            defaults={
                "name": item.name,
                "category": item.category,
                "price": history[-1][1],
                "shipping": item.shipping,
                "units_per_pack": item.units,
                "unit_label": item.unit_label,
                "jan": item.jan,
                "shop_name": item.shop,
                **_points_setup(item, now),
            },
        )
        created["demo_items"] += made
        if not made and _no_points_setup(product) and _points_setup(item, now):
            # A demo seeded before points: its shops' campaigns start now.
            DemoProduct.objects.filter(pk=product.pk).update(**_points_setup(item, now))
            product.refresh_from_db()
        listing, made = Listing.objects.get_or_create(
            source="demo",
            item_code=item.code,
            defaults={
                "name": item.name,
                "shop_name": product.shop_name,
                "category": item.category,
                "units_per_pack": item.units,
                "unit_label": item.unit_label,
                "price": product.price,
                "shipping": product.shipping,
                "in_stock": product.in_stock,
                **points_of(product, now),
                "last_polled_at": now,
                "jan": item.jan,
                "product": _product(item, now),
            },
        )
        created["listings"] += made
        if item.jan and (not product.jan or listing.product_id is None):
            # A demo seeded before products: its items join their products now.
            DemoProduct.objects.filter(pk=product.pk).update(jan=item.jan, shop_name=item.shop)
            Listing.objects.filter(pk=listing.pk).update(jan=item.jan, product=_product(item, now))
        if not listing.price_points.exists():
            PricePoint.objects.bulk_create(
                PricePoint(
                    listing=listing,
                    observed_at=at,
                    price=price,
                    shipping=item.shipping,
                    in_stock=ok,
                    points=points_of(_Priced(product, price), at)["points"],
                )
                for at, price, ok in history
            )
            created["price_points"] += len(history)
    created["products"] = Product.objects.filter(jan__in=jans).count() - products_before
    created["watches"] = _seed_demo_watcher()
    refresh_stats(Listing.objects.filter(source="demo").values_list("id", flat=True), now)
    return created


def _points_setup(item: DemoItem, now: dt.datetime) -> dict:
    """The DemoProduct fields of its shop's points (`demo.catalogue.CAMPAIGNS`,
    `MEMBER_RATES`), its campaign's window placed around `now`; {} for a shop without."""
    fields: dict = {}
    if item.shop in CAMPAIGNS:
        rate, started, hours = CAMPAIGNS[item.shop]
        start = now + dt.timedelta(hours=started)
        fields |= {
            "point_rate": rate,
            "points_from": start,
            "points_until": start + dt.timedelta(hours=hours),
        }
    if item.shop in MEMBER_RATES:
        fields["member_rate"] = MEMBER_RATES[item.shop]
    return fields


def _no_points_setup(product: DemoProduct) -> bool:
    return product.point_rate == 1 and product.points_until is None and not product.member_rate


class _Priced:
    """A demo product at another price (its history's), for `points_of`."""

    def __init__(self, product: DemoProduct, price: int) -> None:
        self.price = price
        self.point_rate = product.point_rate
        self.points_from = product.points_from
        self.points_until = product.points_until
        self.member_rate = product.member_rate


def _product(item: DemoItem, now: dt.datetime) -> Product | None:
    """The product a demo item is one shop's offer of (several demo shops sell it)."""
    if not item.jan:
        return None
    product, _ = Product.objects.get_or_create(
        jan=item.jan,
        defaults={
            "name": item.name,
            "units_per_pack": item.units,
            "unit_label": item.unit_label,
            # Its offers are seeded "just polled", as every demo listing is.
            "last_polled_at": now,
        },
    )
    return product


DEMO_DEVICE_MARK = "demo-watcher"


def _seed_demo_watcher() -> int:
    """A console-channel device watching a few items, so `make run` shows the outbox at work
    without a browser subscription. Nobody can log in as it."""
    # Not a hex digest, so no cookie token can ever hash to it.
    device, _ = Device.objects.get_or_create(
        token_hash=DEMO_DEVICE_MARK,
        defaults={"channel": Channel.CONSOLE, "language": "ja"},
    )
    wanted = [
        ("tp-scottie-12r", Trigger.TARGET_PRICE, {"target_price": 560}),
        ("dt-attack-zero-2k", Trigger.PRICE_DROP, {"drop_percent": 10}),
        ("cf-ucc-golden-1k", Trigger.LOWEST, {}),
        ("pf-chao-churu-60", Trigger.BACK_IN_STOCK, {}),
        ("tp-nepia-18r", Trigger.TARGET_PRICE, {"target_price": 60, "use_unit_price": True}),
        # After points, at ドラッグさくら: its 5× campaign takes some ¥25 off a ¥568 list price.
        ("tp-scottie-12r-s2", Trigger.TARGET_PRICE, {"target_price": 550, "after_points": True}),
    ]
    made = 0
    # Any demo shop selling Scottie 12 rolls at ¥540 or less (a product watch).
    scottie = Listing.objects.get(source="demo", item_code="tp-scottie-12r")
    _, was_made = Watch.objects.get_or_create(
        device=device,
        product=scottie.product,
        trigger=Trigger.TARGET_PRICE,
        removed_at=None,
        defaults={"listing": scottie, "target_price": 540},
    )
    made += was_made
    for code, trigger, params in wanted:
        listing = Listing.objects.get(source="demo", item_code=code)
        _, was_made = Watch.objects.get_or_create(
            device=device,
            listing=listing,
            product=None,
            trigger=trigger,
            removed_at=None,
            defaults=params,
        )
        made += was_made
    return made
