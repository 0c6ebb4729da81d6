"""The world the dispatch benches share: demo listings with their price history, and console
watches with one due row each."""

from __future__ import annotations

import datetime as dt


def demo_listings(codes: list[str], names: list[str]) -> list:
    """A demo product at ¥900 and its listing for each item code, the listing described as
    the polls left it (the shop's name filled in): a re-fetch then has nothing descriptive to
    write, as in production."""
    from demo.models import DemoProduct
    from watches.models import Listing

    products = DemoProduct.objects.bulk_create(
        (DemoProduct(item_code=c, name=n, price=900) for c, n in zip(codes, names, strict=True)),
        batch_size=2000,
    )
    return Listing.objects.bulk_create(
        (
            Listing(
                source="demo",
                item_code=p.item_code,
                name=p.name,
                shop_name=p.shop_name,
                price=900,
            )
            for p in products
        ),
        batch_size=2000,
    )


def listings_with_history(codes: list[str], days: int, per_day: int) -> list:
    """A demo product and a listing at ¥900 for each item code, with `days` of history,
    `per_day` points a day (prices around ¥900–1,100, out of stock now and then), and its
    statistics computed from it."""
    from django.utils import timezone

    from watches.models import PricePoint
    from watches.polling.history import refresh_stats

    listings = demo_listings(codes, [f"bench item {c}" for c in codes])
    now = timezone.now()
    step = dt.timedelta(days=1) / per_day
    points = days * per_day
    PricePoint.objects.bulk_create(
        (
            PricePoint(
                listing=listing,
                observed_at=now - (points - k) * step,
                price=900 + (k * 37 + i) % 200,
                shipping=0,
                in_stock=k % 50 != 0,
            )
            for i, listing in enumerate(listings)
            for k in range(points)
        ),
        batch_size=5000,
    )
    # As the polls that watched them left them: typical price and 90-day low computed.
    refresh_stats([listing.pk for listing in listings], now)
    return listings


def due_rows(devices: list, listings: list, count: int, channel: str) -> None:
    """`count` target-price watches (¥950, the listings at ¥900) spread over `devices` and
    `listings`, each with one due row on `channel`."""
    from django.utils import timezone

    from outbox.enqueue import Detection, enqueue_many
    from watches.models import Trigger, Watch

    watches = Watch.objects.bulk_create(
        (
            Watch(
                device=devices[i % len(devices)],
                listing=listings[i % len(listings)],
                trigger=Trigger.TARGET_PRICE,
                target_price=950,
            )
            for i in range(count)
        ),
        batch_size=2000,
    )
    now = timezone.now()
    enqueue_many(
        Detection(w.pk, w.device_id, channel, Trigger.TARGET_PRICE, now, {"price": 900})
        for w in watches
    )


# How long before a bench's dispatch cycle the poll that detected its rows ran: older than
# OUTBOX_REFETCH_MAX_AGE (the dispatcher asks again), younger than POLL_HISTORY_MIN_MINUTES.
POLLED_BEFORE = dt.timedelta(minutes=2)


def as_the_poll_left_them(cycle_at, built: int, moved: str | None = None) -> None:
    """Every listing as the poll that detected its rows left it, POLLED_BEFORE `cycle_at`: polled
    then, its statistics computed then, its last point what that poll saw — ¥900 (no shipping
    given), what the demo marketplace still answers (the re-fetch writes no point) or, for
    listings whose item code starts with `moved`, ¥920 (the price moved since: it writes one).
    Points after `built` (the history's last id: what earlier runs and polls added) are gone
    first."""
    from django.db import connection, transaction

    # As the ORM stores it (SQLite: naive UTC text), so what reads the text back finds its form.
    polled_at = connection.ops.adapt_datetimefield_value(cycle_at - POLLED_BEFORE)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM watches_pricepoint WHERE id > %s", [built])
        cursor.execute(
            "UPDATE watches_listing SET last_polled_at = %s, stats_at = %s", [polled_at, polled_at]
        )
        cursor.execute(
            "INSERT INTO watches_pricepoint (listing_id, observed_at, price, shipping, in_stock) "
            "SELECT id, %s, CASE WHEN item_code LIKE %s THEN 920 ELSE 900 END, NULL, %s "
            "FROM watches_listing",
            [polled_at, f"{moved}%" if moved else "", True],
        )
