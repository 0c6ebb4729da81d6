"""The simulated world of bench_capacity.py: shops, their catalogues and products; watched
listings whose true prices move on a simulated clock; every item's update times (what a
shop's feed sorts by); watches spread over the watched listings; the first moment each
watch's target is truly crossed; and the same world written into the bench's database.

Everything here is drawn from seeded `random.Random`s, so every scenario of one world (today's
plan and the new one) sees the same prices, updates, watches and crossings. The parameters
and the reasons for their values are in `Params` and in docs/capacity.md.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import math
import random
from array import array
from dataclasses import dataclass, field

# name: (share of items, mean hours between price moves, largest move, dip of the 90-day low
# below the typical price — what the plan reads as volatility). Most shop items keep their
# price for days; a few (electronics, food near its date) move several times a day.
KINDS = {
    "calm": (0.50, 72.0, 0.03, 0.03),
    "normal": (0.35, 24.0, 0.05, 0.08),
    "jumpy": (0.15, 6.0, 0.08, 0.20),
}
SALE_CHANCE_PER_6H = 0.12  # a sale (8-30 % off for 30 min to 3 h) starts on this share of items
POPULAR_SALE_CHANCE_PER_6H = 0.30
POPULAR_PER_LISTING = 0.004  # 400 popular listings in 100,000 share most watches
# The mean rate at which an item's update time moves for a price change (a sale's start and
# end are two): what the unwatched items of a catalogue change at.
PRICE_MOVES_PER_HOUR = sum(share / hours for share, hours, _, _ in KINDS.values()) + (
    2 * SALE_CHANCE_PER_6H / 6
)
UNWATCHED_PRICE = 1_000  # what an unwatched item costs (no one reads it)


@dataclass(frozen=True)
class Params:
    """A world's parameters (docs/capacity.md gives the reasons)."""

    listings: int = 100_000  # watched listings
    shops: int = 5_000  # shops they are drawn from
    zipf: float = 1.0  # the shop of rank k holds a share ∝ 1 / k^zipf of the watched listings
    catalogue: int = 20  # a shop's items per watched listing of it
    edit_hours: float | None = 48.0  # mean hours between other edits of an item; None: never
    product_share: float = 0.30  # of watched listings, offers of a product
    offers: tuple[int, int] = (2, 20)  # shops selling one product
    watches: int = 0  # 0: 10 per watched listing
    hours: float = 3.0
    seed: int = 1
    marketplace: str = "rakuten"  # or "yahoo": the listings' source and item codes

    @property
    def separator(self) -> str:
        """Between a shop's code and its item's in an item code: Rakuten's `shop:item`,
        Yahoo! Shopping's `store_item`."""
        return SEPARATORS[self.marketplace]

    @property
    def watch_count(self) -> int:
        return self.watches or 10 * self.listings


SEPARATORS = {"rakuten": ":", "yahoo": "_"}
MARKETPLACE_NAMES = {"rakuten": "Rakuten Ichiba", "yahoo": "Yahoo! Shopping"}

# Which line of `describe` says how update times move (what differs between worlds that
# share their listings).
UPDATE_LINE = 2


def describe(params: Params) -> list[str]:
    """The world's parameters and price model, as the bench prints them beside its results
    (docs/capacity.md gives the reasons)."""
    low, high = params.offers
    edits = "never" if params.edit_hours is None else f"every {params.edit_hours:g} h on average"
    kinds = ", ".join(
        f"{name} {share:.0%} (a move every {hours:g} h, up to {move:.0%})"
        for name, (share, hours, move, _) in KINDS.items()
    )
    return [
        f"{MARKETPLACE_NAMES[params.marketplace]}: "
        f"{params.listings:,} watched listings over {params.shops:,} shops, Zipf exponent "
        f"{params.zipf:g} (the shop of rank k holds a share ∝ 1/k^{params.zipf:g}); each "
        f"shop's catalogue {params.catalogue}× the listings watched in it, the rest unwatched "
        "but updated too",
        f"{params.product_share:.0%} of watched listings offers of a product (a JAN code) sold "
        f"by {low}–{high} shops; {params.watch_count:,} watches, most on "
        f"{POPULAR_PER_LISTING:.1%} popular listings",
        f"update time: moves on every price or stock change, and on other edits {edits}",
        f"prices: {kinds}; a sale (8–30 % off, 30 min to 3 h) starts on {SALE_CHANCE_PER_6H:.0%} "
        f"of items every 6 h ({POPULAR_SALE_CHANCE_PER_6H:.0%} of popular ones)",
        f"{params.hours:g} simulated hours, seed {params.seed}",
    ]


@dataclass
class Item:
    """A watched listing: its shop (index), true prices over time, watches' targets."""

    code: str
    shop: int
    base: int  # the price at T0: what the database says the last poll saw
    low: int  # the 90-day low seeded into its history
    times: list[float]  # seconds after T0 at which the price changes (0.0 first)
    prices: list[int]
    popular: bool = False
    jan: str = ""
    targets: list[int] = field(default_factory=list)  # one per watch, in watch order

    def price_at(self, seconds: float) -> int:
        return self.prices[bisect.bisect_right(self.times, seconds) - 1]


@dataclass
class Shop:
    """A shop's catalogue: items 0..len(watched)-1 are the watched listings (`watched`: their
    indexes in `World.items`), the rest unwatched. `initial`: the order of its feed at T0
    (most recently updated first); `at`/`which`: every update after T0, in time order."""

    code: str
    watched: list[int]
    size: int
    initial: array = field(default_factory=lambda: array("i"))
    at: array = field(default_factory=lambda: array("d"))
    which: array = field(default_factory=lambda: array("i"))


@dataclass
class World:
    params: Params
    items: list[Item]
    shops: list[Shop]
    products: dict[str, list[int]]  # JAN code → its offers (indexes in `items`)
    horizon: float  # seconds

    @property
    def watches(self) -> int:
        return sum(len(item.targets) for item in self.items)

    def watched(self) -> int:
        return len(self.items)

    def shop_page(self, shop: Shop, seconds: float, page: int, hits: int) -> list[int]:
        """The catalogue indexes on page `page` of the shop's items most recently updated
        first, as they stand `seconds` after T0."""
        want = page * hits
        out: list[int] = []
        seen: set[int] = set()
        k = bisect.bisect_right(shop.at, seconds) - 1
        while k >= 0 and len(out) < want:
            i = shop.which[k]
            if i not in seen:
                seen.add(i)
                out.append(i)
            k -= 1
        for i in shop.initial:
            if len(out) >= want:
                break
            if i not in seen:
                seen.add(i)
                out.append(i)
        return out[(page - 1) * hits : want]


def build_world(params: Params) -> World:
    """The shops, their watched listings with prices, watches and products (the update
    times come with `set_updates`)."""
    rng = random.Random(params.seed)
    horizon = params.hours * 3600.0
    weights = [1 / (rank + 1) ** params.zipf for rank in range(params.shops)]
    drawn = rng.choices(range(params.shops), cum_weights=list(itertools.accumulate(weights)),
                        k=params.listings)  # fmt: skip
    shops = [Shop(f"shop{n}", [], 0) for n in range(params.shops)]
    kinds = list(KINDS)
    shares = [KINDS[kind][0] for kind in kinds]
    items = []
    for n, rank in enumerate(drawn):
        kind = rng.choices(kinds, shares)[0]
        base = round(math.exp(rng.uniform(math.log(200), math.log(5000))))
        code = f"{shops[rank].code}{params.separator}w{len(shops[rank].watched)}"
        shops[rank].watched.append(n)
        items.append(_walk(rng, code, rank, base, kind, horizon))
    shops = [shop for shop in shops if shop.watched]  # a shop nobody watches is not read
    for index, shop in enumerate(shops):
        shop.size = params.catalogue * len(shop.watched)
        for n in shop.watched:
            items[n].shop = index
    products = _products(rng, items, params)
    _spread_watches(rng, items, params.watch_count, horizon)
    return World(params, items, shops, products, horizon)


def _walk(rng: random.Random, code: str, shop: int, base: int, kind: str, horizon: float) -> Item:
    _, mean_hours, step, dip = KINDS[kind]
    times, walk = [0.0], [float(base)]
    at, price = 0.0, float(base)
    while True:
        at += rng.expovariate(1 / (mean_hours * 3600))
        if at >= horizon:
            break
        # A random walk that drifts back towards the usual price.
        price = price * (1 + rng.uniform(-step, step)) + 0.1 * (base - price)
        times.append(at)
        walk.append(price)
    prices = [round(value) for value in walk]
    prices[0] = base
    return Item(code, shop, base, max(1, round(base * (1 - dip))), times, prices)


def _add_sale(rng: random.Random, item: Item, horizon: float) -> None:
    """A sale: 8-30 % off for 30 minutes to 3 hours, then back to the walk."""
    start = rng.uniform(0, horizon)
    end = min(horizon, start + rng.uniform(1800, 3 * 3600))
    depth = rng.uniform(0.08, 0.30)
    times = sorted({*item.times, start, end})
    prices = []
    for at in times:
        price = item.price_at(at)
        prices.append(round(price * (1 - depth)) if start <= at < end else price)
    item.times, item.prices = times, prices


def _products(rng: random.Random, items: list[Item], params: Params) -> dict[str, list[int]]:
    """`product_share` of the watched listings grouped into products of 2-20 offers, each
    offer in another shop (every offer of a product is a watched listing)."""
    pool = rng.sample(range(len(items)), round(params.product_share * len(items)))
    products: dict[str, list[int]] = {}
    low, high = params.offers
    while len(pool) >= low:
        want = rng.randint(low, high)
        offers: list[int] = []
        shops: set[int] = set()
        rest = []
        while pool and len(offers) < want:
            n = pool.pop()
            if items[n].shop in shops:
                rest.append(n)
            else:
                offers.append(n)
                shops.add(items[n].shop)
        pool.extend(rest)
        if len(offers) < low:
            break  # what is left sits in too few shops
        jan = f"49{len(products):011d}"
        for n in offers:
            items[n].jan = jan
        products[jan] = offers
    return products


def _spread_watches(rng: random.Random, items: list[Item], watches: int, horizon: float):
    """Most listings get 1-3 watches, a few hundred popular ones the rest (the most popular
    most). Targets lie 0.5-30 % below the price at T0, most within 8 %."""
    order = list(range(len(items)))
    rng.shuffle(order)
    popular = max(1, round(len(items) * POPULAR_PER_LISTING))
    popular_ids = order[:popular]
    counts = {i: rng.choices((1, 2, 3), (0.6, 0.3, 0.1))[0] for i in order[popular:]}
    left = max(popular, watches - sum(counts.values()))
    shares = [1 / math.sqrt(rank + 1) for rank in range(popular)]
    total = sum(shares)
    for rank, i in enumerate(popular_ids):
        counts[i] = max(1, round(left * shares[rank] / total))
        items[i].popular = True
    for i in range(len(items)):
        item = items[i]
        for _ in range(counts[i]):
            away = rng.uniform(0.005, 0.08) if rng.random() < 0.6 else rng.uniform(0.08, 0.30)
            item.targets.append(max(1, math.floor(item.base * (1 - away))))
    for item in items:
        chance = POPULAR_SALE_CHANCE_PER_6H if item.popular else SALE_CHANCE_PER_6H
        if rng.random() < chance * horizon / (6 * 3600):
            _add_sale(rng, item, horizon)


def set_updates(world: World, edit_hours: float | None, seed: int) -> None:
    """Every item's update times, shop by shop: a watched listing's at each price move and
    each other edit (one every `edit_hours` on average, none when None); an unwatched item's
    by the same rates, drawn for the shop as a whole (a Poisson process of the catalogue's
    rate, each update falling on one of its unwatched items at random)."""
    rng = random.Random(seed + 7)
    horizon = world.horizon
    edits = 0.0 if edit_hours is None else 1 / (edit_hours * 3600)
    unwatched_rate = PRICE_MOVES_PER_HOUR / 3600 + edits
    for shop in world.shops:
        events: list[tuple[float, int]] = []
        for i, n in enumerate(shop.watched):
            events.extend((at, i) for at in world.items[n].times[1:])
            events.extend((at, i) for at in _poisson(rng, edits, horizon))
        unwatched = shop.size - len(shop.watched)
        first = len(shop.watched)
        events.extend(
            (at, first + rng.randrange(unwatched))
            for at in _poisson(rng, unwatched * unwatched_rate, horizon)
        )
        events.sort()
        shop.at = array("d", (at for at, _ in events))
        shop.which = array("i", (i for _, i in events))
        initial = list(range(shop.size))
        rng.shuffle(initial)
        shop.initial = array("i", initial)


def _poisson(rng: random.Random, rate: float, horizon: float) -> list[float]:
    """The moments of a Poisson process of `rate` per second over [0, horizon)."""
    out: list[float] = []
    if rate <= 0:
        return out
    at = rng.expovariate(rate)
    while at < horizon:
        out.append(at)
        at += rng.expovariate(rate)
    return out


def crossings(world: World) -> list[float | None]:
    """Per watch (in the order the watches were written): when its target was truly
    crossed, seconds after T0, or None."""
    out: list[float | None] = []
    for item in world.items:
        negative_min, at_min = _running_minimum(item)
        for target in item.targets:
            k = bisect.bisect_left(negative_min, -target)
            out.append(at_min[k] if k < len(at_min) else None)
    return out


def crossing_events(world: World, after: float, before: float) -> list[int]:
    """The watches each listing's price crosses at once, per moment (a moment at which the
    running minimum passes one or more targets), for the moments in [after, before): what
    one request at that moment would detect."""
    sizes: list[int] = []
    for item in world.items:
        negative_min, at_min = _running_minimum(item)
        crossed_at: dict[float, int] = {}
        for target in item.targets:
            k = bisect.bisect_left(negative_min, -target)
            if k < len(at_min) and after <= at_min[k] < before:
                crossed_at[at_min[k]] = crossed_at.get(at_min[k], 0) + 1
        sizes.extend(crossed_at.values())
    return sizes


def _running_minimum(item: Item) -> tuple[list[int], list[float]]:
    negative_min: list[int] = []
    at_min: list[float] = []
    low = math.inf
    for at, price in zip(item.times, item.prices, strict=True):
        if price < low:
            low = price
            negative_min.append(-price)
            at_min.append(at)
    return negative_min, at_min


# --- the database ------------------------------------------------------------------------

START_TABLE = "bench_capacity_start"


def write_world(world: World, t0: dt.datetime) -> list[int]:
    """Products, listings, devices, watches and a little history (so the typical price and
    the 90-day low, which the plan reads, survive the first poll). Returns the watch ids in
    world order.

    A million rows through the ORM take minutes: each table gets one row made by the ORM (so
    every column has what the model gives it), then the rest is copied from it in one
    INSERT … SELECT, with the columns that differ taken from a scratch table."""
    from django.db import connection, transaction

    from watches.models import Channel, Device, Listing, PricePoint, Product, Trigger, Watch

    rng = random.Random(world.params.seed + 1)
    adapt = connection.ops.adapt_datetimefield_value
    devices = max(1, world.watches // 10)
    with transaction.atomic():
        product_ids: dict[str, int] = {}
        if world.products:
            Product.objects.bulk_create(
                (Product(jan=jan, name=f"商品 {jan}") for jan in world.products), batch_size=500
            )
            product_ids = dict(Product.objects.values_list("jan", "id"))
        device = Device.objects.create(token_hash="template", channel=Channel.CONSOLE)
        _copy(device, {"token_hash": "varchar(64)"}, ((f"{i:064x}",) for i in range(devices)))
        device_ids = _ids(Device)
        template = Listing.objects.create(
            source=world.params.marketplace,
            item_code="template",
            shipping=0,
            in_stock=True,
            created_at=t0,
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
                "jan": "varchar(14)",
                "product_id": "bigint",
            },
            (
                (
                    item.code,
                    f"テスト商品 {item.code.partition(world.params.separator)[2]}",
                    item.base,
                    item.base,
                    item.low,
                    # Polled before T0 in no particular order: both plans start alike.
                    adapt(t0 - dt.timedelta(seconds=rng.uniform(60, 48 * 3600))),
                    item.jan,
                    product_ids.get(item.jan),
                )
                for item in world.items
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
                for listing_id, item in zip(listing_ids, world.items, strict=True)
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
        per_device = max(1, world.watches // devices)
        _copy(
            watch,
            {"target_price": "integer", "device_id": "bigint", "listing_id": "bigint"},
            (
                (target, device_ids[n // per_device % len(device_ids)], listing_id)
                for n, (listing_id, target) in enumerate(
                    (listing_id, target)
                    for listing_id, item in zip(listing_ids, world.items, strict=True)
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


def clear_world() -> None:
    """Remove a world written by `write_world` (and all its scenarios left)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        for table in (
            "outbox_outboxevent",
            "outbox_outbox",
            "watches_watch",
            "watches_pricepoint",
            "watches_listing",
            "watches_offerpage",
            "watches_product",
            "watches_device",
            "watches_shopfeed",
            "watches_feedcheck",
        ):
            cursor.execute(f"DELETE FROM {table}")
        cursor.execute(f"DROP TABLE IF EXISTS {START_TABLE}")


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
    """Back to T0: the listings as written, no history, outbox rows, misses, shop feeds or
    feed checks since."""
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
        cursor.execute("DELETE FROM watches_shopfeed")
        cursor.execute("DELETE FROM watches_feedcheck")
        cursor.execute("UPDATE watches_product SET last_polled_at = NULL, last_error = ''")
        cursor.execute(
            "UPDATE watches_watch SET missed_at = NULL, missed_price = NULL "
            "WHERE missed_at IS NOT NULL"
        )
