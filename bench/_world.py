"""The world the dispatch benches share: listings (the Rakuten offers of bench/_ichiba.py) with
their price history, and watches with one due row each."""

from __future__ import annotations

import datetime as dt


def with_history(listings: list, days: int, per_day: int) -> list:
    """`listings` (at ¥900) with `days` of history, `per_day` points a day (prices around
    ¥900–1,100, out of stock now and then), and their statistics computed from it."""
    from django.utils import timezone

    from watches.models import PricePoint
    from watches.polling.history import refresh_stats

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


def as_the_poll_left_them(cycle_at, built: int) -> None:
    """Every listing as the poll that detected its rows left it, POLLED_BEFORE `cycle_at`: polled
    then, its statistics computed then, its price and last point what that poll saw — ¥900 in
    stock, with the listing's shipping and points (`_ichiba.rakuten_offers` gives them as the
    fake answers them). Where the marketplace still answers that, the re-fetch writes no point;
    where a bench moved the price since (bench_dispatch's fake Ichiba), it writes one. Points
    after `built` (the history's last id: what earlier runs and polls added) are gone first."""
    from django.db import connection, transaction

    # As the ORM stores it (SQLite: naive UTC text), so what reads the text back finds its form.
    polled_at = connection.ops.adapt_datetimefield_value(cycle_at - POLLED_BEFORE)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM watches_pricepoint WHERE id > %s", [built])
        # The price too: a re-fetch of a moved price wrote it in the run before.
        cursor.execute(
            "UPDATE watches_listing SET price = 900, in_stock = %s, last_polled_at = %s, "
            "stats_at = %s",
            [True, polled_at, polled_at],
        )
        cursor.execute(
            "INSERT INTO watches_pricepoint (listing_id, observed_at, price, shipping, in_stock, "
            "points) SELECT id, %s, 900, shipping, %s, points FROM watches_listing",
            [polled_at, True],
        )
