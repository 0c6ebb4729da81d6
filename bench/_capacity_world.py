"""The simulated world of bench_capacity.py: listings whose true prices move on a simulated
clock, watches spread over them, the first moment each watch's target is truly crossed, and
the same world written into the bench's database (reset between scenarios).

Everything here is drawn from one seeded `random.Random`, so every scenario (1 or 4
application ids, plan or oldest-first) sees the same prices, watches and crossings.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import random
from dataclasses import dataclass, field

UNWATCHED_SHARE = 0.05  # listings nobody watches
POPULAR_PER_LISTING = 0.004  # 400 popular listings in 100,000
# name: (share of listings, mean minutes between price moves, largest move, dip of the 90-day
# low below the typical price — what the plan reads as volatility)
KINDS = {
    "calm": (0.50, 360.0, 0.02, 0.02),
    "normal": (0.35, 120.0, 0.04, 0.08),
    "jumpy": (0.15, 30.0, 0.07, 0.20),
}
SALE_CHANCE_PER_6H = 0.12  # a sale starts on this share of listings in 6 simulated hours
POPULAR_SALE_CHANCE_PER_6H = 0.30


@dataclass
class Listing:
    code: str
    base: int  # the price at T0: what the database says the last poll saw
    low: int  # the 90-day low seeded into its history
    times: list[float]  # seconds after T0 at which the price changes (0.0 first)
    prices: list[int]
    popular: bool = False
    targets: list[int] = field(default_factory=list)  # one per watch, in watch order

    def price_at(self, seconds: float) -> int:
        return self.prices[bisect.bisect_right(self.times, seconds) - 1]

    def first_at_or_below(self, target: int) -> float | None:
        """When the true price first reaches `target` (None: not within the horizon)."""
        for at, price in zip(self.times, self.prices, strict=True):
            if price <= target:
                return at
        return None


@dataclass
class World:
    listings: list[Listing]
    horizon: float  # seconds
    devices: int

    @property
    def watches(self) -> int:
        return sum(len(item.targets) for item in self.listings)

    def watched(self) -> int:
        return sum(1 for item in self.listings if item.targets)


def build_world(listings: int, watches: int, hours: float, seed: int) -> World:
    rng = random.Random(seed)
    horizon = hours * 3600.0
    kinds = list(KINDS)
    weights = [KINDS[kind][0] for kind in kinds]
    items = []
    for i in range(listings):
        kind = rng.choices(kinds, weights)[0]
        base = round(math.exp(rng.uniform(math.log(200), math.log(5000))))
        items.append(_walk(rng, f"shop{i % 97}:item{i}", base, kind, horizon))
    _spread_watches(rng, items, watches, horizon)
    return World(items, horizon, devices=max(1, watches // 10))


def _walk(rng: random.Random, code: str, base: int, kind: str, horizon: float) -> Listing:
    _, mean_minutes, step, dip = KINDS[kind]
    times, walk = [0.0], [float(base)]
    at, price = 0.0, float(base)
    while True:
        at += rng.expovariate(1 / (mean_minutes * 60))
        if at >= horizon:
            break
        # A random walk that drifts back towards the usual price.
        price = price * (1 + rng.uniform(-step, step)) + 0.1 * (base - price)
        times.append(at)
        walk.append(price)
    listing = Listing(code, base, max(1, round(base * (1 - dip))), times, [])
    listing.prices = [round(value) for value in walk]
    listing.prices[0] = base
    return listing


def _add_sale(rng: random.Random, listing: Listing, horizon: float) -> None:
    """A sale: 8-30 % off for 30 minutes to 3 hours, then back to the walk."""
    start = rng.uniform(0, horizon)
    end = min(horizon, start + rng.uniform(1800, 3 * 3600))
    depth = rng.uniform(0.08, 0.30)
    times = sorted({*listing.times, start, end})
    prices = []
    for at in times:
        price = listing.price_at(at)
        prices.append(round(price * (1 - depth)) if start <= at < end else price)
    listing.times, listing.prices = times, prices


def _spread_watches(rng: random.Random, items: list[Listing], watches: int, horizon: float):
    """Most listings get 1-3 watches, a few hundred popular ones the rest (the most popular
    most), 5 % none. Targets lie 0.5-30 % below the price at T0, most within 8 %."""
    order = list(range(len(items)))
    rng.shuffle(order)
    unwatched = int(len(items) * UNWATCHED_SHARE)
    popular = max(1, round(len(items) * POPULAR_PER_LISTING))
    popular_ids = order[unwatched : unwatched + popular]
    counts = dict.fromkeys(order[unwatched + popular :], 0)
    for i in counts:
        counts[i] = rng.choices((1, 2, 3), (0.6, 0.3, 0.1))[0]
    left = max(popular, watches - sum(counts.values()))
    shares = [1 / math.sqrt(rank + 1) for rank in range(popular)]
    total = sum(shares)
    for rank, i in enumerate(popular_ids):
        counts[i] = max(1, round(left * shares[rank] / total))
        items[i].popular = True
    for i, count in counts.items():
        item = items[i]
        for _ in range(count):
            away = rng.uniform(0.005, 0.08) if rng.random() < 0.6 else rng.uniform(0.08, 0.30)
            item.targets.append(max(1, math.floor(item.base * (1 - away))))
    for item in items:
        chance = POPULAR_SALE_CHANCE_PER_6H if item.popular else SALE_CHANCE_PER_6H
        if rng.random() < chance * horizon / (6 * 3600):
            _add_sale(rng, item, horizon)


def crossings(world: World) -> list[float | None]:
    """Per watch (in the order the watches were written): when its target was truly
    crossed, seconds after T0, or None."""
    out: list[float | None] = []
    for item in world.listings:
        if not item.targets:
            continue
        # Running minimum: the first time it reaches a target is when the price does.
        negative_min, at_min, low = [], [], math.inf
        for at, price in zip(item.times, item.prices, strict=True):
            if price < low:
                low = price
                negative_min.append(-price)
                at_min.append(at)
        for target in item.targets:
            k = bisect.bisect_left(negative_min, -target)
            out.append(at_min[k] if k < len(at_min) else None)
    return out


# --- the database ------------------------------------------------------------------------

START_TABLE = "bench_capacity_start"


def write_world(world: World, t0: dt.datetime, seed: int) -> list[int]:
    """Listings, devices, watches and a little history (so the typical price and the 90-day
    low, which the plan reads, survive the first poll). Returns the watch ids in world
    order.

    A million rows through the ORM take minutes: each table gets one row made by the ORM (so
    every column has what the model gives it), then the rest is copied from it in one
    INSERT … SELECT, with the columns that differ taken from a scratch table."""
    from django.db import connection, transaction

    from watches.models import Channel, Device, Listing, PricePoint, Trigger, Watch

    rng = random.Random(seed + 1)
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic():
        device = Device.objects.create(token_hash="template", channel=Channel.CONSOLE)
        _copy(device, {"token_hash": "varchar(64)"}, ((f"{i:064x}",) for i in range(world.devices)))
        device_ids = _ids(Device)
        template = Listing.objects.create(
            source="rakuten", item_code="template", shipping=0, in_stock=True, created_at=t0
        )
        polled = Listing._meta.get_field("last_polled_at").db_type(connection)
        assert polled is not None  # a column's SQL type
        _copy(
            template,
            {
                "item_code": "varchar(200)",
                "name": "varchar(500)",
                "price": "integer",
                "typical_price": "integer",
                "low_90": "integer",
                "last_polled_at": polled,
            },
            (
                (
                    item.code,
                    f"テスト商品 {item.code.partition(':')[2]}",
                    item.base,
                    item.base,
                    item.low,
                    # Polled before T0 in no particular order: both orders start alike.
                    adapt(t0 - dt.timedelta(seconds=rng.uniform(60, 48 * 3600))),
                )
                for item in world.listings
            ),
        )
        listing_ids = _ids(Listing)
        point = PricePoint.objects.create(
            listing=Listing.objects.get(pk=listing_ids[0]), observed_at=t0, price=1, in_stock=True
        )
        point.shipping = 0
        point.save()
        observed = PricePoint._meta.get_field("observed_at").db_type(connection)
        assert observed is not None  # a column's SQL type
        _copy(
            point,
            {"observed_at": observed, "price": "integer", "listing_id": "bigint"},
            (
                (adapt(t0 - dt.timedelta(days=days)), price, listing_id)
                for listing_id, item in zip(listing_ids, world.listings, strict=True)
                for days, price in ((60, item.base), (20, item.low), (1, item.base))
            ),
        )
        watch = Watch.objects.create(
            listing_id=listing_ids[0],
            device_id=device_ids[0],
            trigger=Trigger.TARGET_PRICE,
            target_price=1,
            created_at=t0 - dt.timedelta(days=1),
            updated_at=t0 - dt.timedelta(days=1),
        )
        per_device = max(1, world.watches // world.devices)
        _copy(
            watch,
            {"target_price": "integer", "device_id": "bigint", "listing_id": "bigint"},
            (
                (target, device_ids[n // per_device % len(device_ids)], listing_id)
                for n, (listing_id, target) in enumerate(
                    (listing_id, target)
                    for listing_id, item in zip(listing_ids, world.listings, strict=True)
                    for target in item.targets
                )
            ),
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TABLE {START_TABLE} AS SELECT id, name, price, in_stock, "
                "typical_price, low_90, last_polled_at FROM watches_listing"
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return _ids(Watch)


def _ids(model) -> list[int]:
    return list(model.objects.order_by("pk").values_list("pk", flat=True))


def _copy(template, columns: dict[str, str], rows) -> None:
    """Insert one row per `rows` item: `template`'s values, but for `columns` (name → SQL
    type) those of the item. The template row is deleted; the new rows' ids follow `rows`."""
    from django.db import connection

    table = template._meta.db_table
    scratch = f"bench_capacity_{table}"
    quote = connection.ops.quote_name
    names = list(columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {scratch} (n integer PRIMARY KEY, "
            + ", ".join(f"{quote(name)} {kind}" for name, kind in columns.items())
            + ")"
        )
        placeholders = ", ".join(["%s"] * (len(names) + 1))
        batch: list[tuple] = []
        for n, row in enumerate(rows):
            batch.append((n, *row))
            if len(batch) == 50_000:
                cursor.executemany(f"INSERT INTO {scratch} VALUES ({placeholders})", batch)
                batch = []
        if batch:
            cursor.executemany(f"INSERT INTO {scratch} VALUES ({placeholders})", batch)
        fields = [f.column for f in template._meta.concrete_fields if not f.primary_key]
        chosen = [f"s.{quote(c)}" if c in columns else f"t.{quote(c)}" for c in fields]
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(quote(c) for c in fields)}) "
            f"SELECT {', '.join(chosen)} FROM {scratch} s, {table} t "
            f"WHERE t.id = %s ORDER BY s.n",
            [template.pk],
        )
        cursor.execute(f"DROP TABLE {scratch}")
    template.delete()


def reset_world(t0: dt.datetime) -> None:
    """Back to T0: the listings as written, no history, outbox rows or misses since."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE watches_listing SET name = s.name, price = s.price, "
            "in_stock = s.in_stock, typical_price = s.typical_price, low_90 = s.low_90, "
            "last_polled_at = s.last_polled_at, last_error = '', last_error_at = NULL "
            f"FROM {START_TABLE} s WHERE s.id = watches_listing.id"
        )
        cursor.execute(
            "DELETE FROM watches_pricepoint WHERE observed_at >= %s",
            [connection.ops.adapt_datetimefield_value(t0)],
        )
        cursor.execute("DELETE FROM outbox_outboxevent")
        cursor.execute("DELETE FROM outbox_outbox")
        cursor.execute(
            "UPDATE watches_watch SET missed_at = NULL, missed_price = NULL "
            "WHERE missed_at IS NOT NULL"
        )
