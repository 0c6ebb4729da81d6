"""The bench's world: a million outbox rows as a live system accumulates them.

`build(rows)` fills a migrated, empty database (SQLite or PostgreSQL) with listings, devices,
watches, `rows` outbox rows spread over the days before now — one row per watch and service
day, so the dedup index never folds one — and a fortnight of dispatch cycles.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import zoneinfo

WATCHES = 10_000
LISTINGS = 1_000
DISPATCH_RUNS = 20_000
ZONE = zoneinfo.ZoneInfo("Asia/Tokyo")

# Old rows end in one of these; weights are per 1,000.
TERMINAL_MIX = [
    (("sent", "delivered"), 770),
    (("dropped", "condition_lost"), 90),
    (("dropped", "already_notified"), 40),
    (("dropped", "out_of_stock"), 30),
    (("dropped", "watch_removed"), 20),
    (("dropped", "no_subscription"), 15),
    (("dropped", "subscription_gone"), 10),
    (("dropped", "listing_paused"), 3),
    (("dropped", "item_not_found"), 1),
    (("dropped", "watch_paused"), 1),
    (("dropped", "manual"), 1),
    (("failed", "deliver_server"), 8),
    (("failed", "refetch_network"), 5),
    (("failed", "deliver_rejected"), 3),
    (("failed", "lease_expired"), 2),
]
# The last day's rows are partly still in the queue.
LIVE_MIX = [
    (("pending", ""), 250),
    (("retry", "refetch_rate_limited"), 40),
    (("retry", "deliver_network"), 30),
    (("retry", "deliver_server"), 20),
    (("sending", "claimed"), 20),
    *TERMINAL_MIX,
]


def build(rows: int, seed: int = 5) -> None:
    """Fill a migrated, empty database. Plain executemany (COPY on PostgreSQL) inside one
    transaction: the ORM would take many minutes for a million rows."""
    from django.db import connection, transaction
    from django.utils import timezone

    from outbox.models import DispatchRun
    from watches.models import Device, Listing, Watch

    rng = random.Random(seed)
    now = timezone.now()

    Listing.objects.bulk_create(
        Listing(
            source="demo",
            item_code=f"bench-{i}",
            name=f"ベンチ 商品 {i}",
            price=1000,
            last_polled_at=now,
        )
        for i in range(LISTINGS)
    )
    Device.objects.bulk_create(
        Device(
            token_hash=f"{i:064x}",
            channel="webpush",
            push_active=i % 10 != 0,
            push_endpoint=f"https://push.example.test/{i}",
        )
        for i in range(WATCHES)
    )
    listing_ids = list(Listing.objects.order_by("id").values_list("id", flat=True))
    device_ids = list(Device.objects.order_by("id").values_list("id", flat=True))
    Watch.objects.bulk_create(
        Watch(
            device_id=device_ids[i],
            listing_id=listing_ids[i % LISTINGS],
            trigger="target_price",
            target_price=900,
        )
        for i in range(WATCHES)
    )
    watch_ids = list(Watch.objects.order_by("id").values_list("id", flat=True))

    adapt = connection.ops.adapt_datetimefield_value
    days = -(-rows // WATCHES)
    today = now.astimezone(ZONE).date()
    first_day = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time.min, tzinfo=ZONE)
    terminal = _picker(TERMINAL_MIX, rng)
    live = _picker(LIVE_MIX, rng)
    columns = (
        "watch_id, device_id, channel, trigger, status, previous_status, reason, detail, "
        "detected_at, detected_payload, sent_message, retry_count, attempts, next_attempt_at, "
        "claimed_at, claimed_by, sent_at, created_at, updated_at"
    )
    write = _copy_writer if connection.vendor == "postgresql" else _insert_writer
    batch: list[tuple] = []
    with transaction.atomic(), connection.cursor() as cursor, write(cursor, columns) as flush:
        for i in range(rows):
            day, w = divmod(i, WATCHES)
            # One row per watch per service day: the dedup index never folds one.
            detected = first_day + dt.timedelta(days=day, seconds=rng.randrange(86_400))
            detected = min(detected, now - dt.timedelta(seconds=rng.randrange(60, 3_600)))
            recent = now - detected < dt.timedelta(days=1)
            status, reason = (live if recent else terminal)()
            moved = detected + dt.timedelta(seconds=rng.randrange(5, 3_600))
            moved = min(moved, now)
            retry_count, next_attempt, claimed_at, claimed_by, sent_at = 0, moved, None, "", None
            previous = "sending"
            if status == "pending":
                moved, next_attempt, previous = detected, detected, ""
            elif status == "retry":
                retry_count = rng.randrange(1, 6)
                next_attempt = moved + dt.timedelta(seconds=30 * 2**retry_count)
            elif status == "sending":
                claimed_at = now - dt.timedelta(seconds=rng.randrange(0, 900))
                claimed_by, moved, previous = "bench:1:x", claimed_at, "pending"
            elif status == "sent":
                sent_at = moved
            elif status == "failed":
                retry_count = 8
            payload = (
                f'{{"price": {rng.randrange(500, 2000)}, "in_stock": true, '
                f'"observed_at": "{detected.isoformat()}"}}'
            )
            message = '{"title": "ベンチ", "body": "¥900"}' if status == "sent" else None
            batch.append(
                (
                    watch_ids[w],
                    device_ids[w],
                    "webpush",
                    "target_price",
                    status,
                    previous,
                    reason,
                    "",
                    adapt(detected),
                    payload,
                    message,
                    retry_count,
                    1,
                    adapt(next_attempt),
                    adapt(claimed_at) if claimed_at else None,
                    claimed_by,
                    adapt(sent_at) if sent_at else None,
                    adapt(detected),
                    adapt(moved),
                )
            )
            if len(batch) >= 50_000:
                flush(batch)
                batch.clear()
        if batch:
            flush(batch)
    DispatchRun.objects.bulk_create(
        (
            DispatchRun(
                started_at=now - dt.timedelta(minutes=i),
                finished_at=now - dt.timedelta(minutes=i),
                holder="bench:1:x",
                claimed=10,
                sent=8,
                dropped=2,
            )
            for i in range(DISPATCH_RUNS)
        ),
        batch_size=500,
    )


@contextlib.contextmanager
def _insert_writer(cursor, columns: str):
    sql = f"INSERT INTO outbox_outbox ({columns}) VALUES ({', '.join(['%s'] * 19)})"
    yield lambda batch: cursor.executemany(sql, batch)


@contextlib.contextmanager
def _copy_writer(cursor, columns: str):
    """PostgreSQL's COPY: a million rows in seconds rather than minutes."""
    with cursor.cursor.copy(f"COPY outbox_outbox ({columns}) FROM STDIN") as copy:
        yield lambda batch: [copy.write_row(row) for row in batch]


def _picker(mix, rng: random.Random):
    choices = [item for item, _ in mix]
    weights = [weight for _, weight in mix]

    def pick():
        return rng.choices(choices, weights)[0]

    return pick
