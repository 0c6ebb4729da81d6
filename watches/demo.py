"""The demo world: a catalogue of everyday consumables on the built-in demo marketplace, with
90 days of plausible price history, so a fresh `make run` has something to watch, and a market
that keeps moving (`tick`: sales, stock-outs, recoveries) so the outbox has something to do."""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from watches.history import refresh_stats
from watches.models import Channel, DemoProduct, Device, Listing, PricePoint, Trigger, Watch


@dataclass(frozen=True)
class DemoItem:
    code: str
    name: str
    category: str
    price: int
    units: int | None
    unit_label: str
    shipping: int | None = 0


# fmt: off
CATALOGUE: tuple[DemoItem, ...] = (
    DemoItem(
        "tp-scottie-12r",
        "スコッティ フラワーパック トイレットペーパー 12ロール ダブル",
        "トイレットペーパー",
        598,
        12,
        "roll",
    ),
    DemoItem(
        "tp-nepia-18r",
        "ネピア 鼻セレブ トイレットロール 18ロール",
        "トイレットペーパー",
        1180,
        18,
        "roll",
    ),
    DemoItem(
        "tp-elleair-24r",
        "エリエール トイレットティシュー 24ロール シングル 100m",
        "トイレットペーパー",
        1480,
        24,
        "roll",
    ),
    DemoItem(
        "ts-kleenex-5p", "クリネックス ティシュー 5箱パック 360枚", "ティッシュ", 438, 5, "box"
    ),
    DemoItem(
        "dt-attack-zero-2k", "アタックZERO 洗濯洗剤 詰め替え 超特大 2.0kg", "洗剤", 1298, 2000, "g"
    ),
    DemoItem("dt-ariel-gel-12", "アリエール ジェルボール4D 12個入", "洗剤", 498, 12, "pc"),
    DemoItem("dt-joy-1l", "ジョイ W除菌 食器用洗剤 詰め替え 1065ml", "洗剤", 548, 1065, "ml"),
    DemoItem(
        "dt-bold-refill",
        "ボールド ジェル 洗濯洗剤 詰め替え 超ジャンボ 1.68kg",
        "洗剤",
        1078,
        1680,
        "g",
    ),
    DemoItem(
        "cf-ucc-golden-1k", "UCC ゴールドスペシャル コーヒー豆(粉) 1kg", "コーヒー", 1580, 1000, "g"
    ),
    DemoItem(
        "cf-key-drip-40",
        "キーコーヒー ドリップオン バラエティパック 40杯",
        "コーヒー",
        1098,
        40,
        "cup",
    ),
    DemoItem(
        "cf-nescafe-gold-120",
        "ネスカフェ ゴールドブレンド 詰め替え 120g",
        "コーヒー",
        988,
        120,
        "g",
    ),
    DemoItem(
        "cf-boss-can-24",
        "サントリー BOSS 無糖ブラック 185g×24本",
        "コーヒー",
        2180,
        24,
        "can",
        None,
    ),
    DemoItem(
        "pf-chao-churu-60", "いなば CIAO ちゅ〜る まぐろ 14g×60本", "ペットフード", 1980, 60, "pc"
    ),
    DemoItem(
        "pf-canin-indoor-4k",
        "ロイヤルカナン インドア 成猫用 4kg",
        "ペットフード",
        7480,
        4000,
        "g",
        500,
    ),
    DemoItem(
        "pf-pedigree-8k",
        "ペディグリー 成犬用 旨みビーフ&緑黄色野菜 8kg",
        "ペットフード",
        3280,
        8000,
        "g",
    ),
    DemoItem(
        "pf-unicharm-sheet-100",
        "ユニ・チャーム デオシート 厚型 レギュラー 100枚",
        "ペットフード",
        1680,
        100,
        "sheet",
    ),
    DemoItem(
        "sh-merit-refill-2l",
        "メリット シャンプー 詰め替え 大容量 2000ml",
        "シャンプー",
        1380,
        2000,
        "ml",
    ),
    DemoItem(
        "sh-biore-u-refill",
        "ビオレu ボディウォッシュ 詰め替え 1.35L",
        "シャンプー",
        798,
        1350,
        "ml",
    ),
    DemoItem("wt-iroha-24", "い・ろ・は・す 天然水 555ml×24本", "飲料", 1280, 24, "bottle", None),
    DemoItem("wt-suntory-2l-9", "サントリー 天然水 2L×9本", "飲料", 1180, 9, "bottle", None),
    DemoItem("kt-saran-wrap", "サランラップ 30cm×50m 5本パック", "キッチン", 1298, 5, "roll"),
    DemoItem("kt-ziploc-l-60", "ジップロック フリーザーバッグ L 60枚", "キッチン", 698, 60, "bag"),
    DemoItem(
        "dp-merries-l-108", "メリーズ パンツ Lサイズ 54枚×2パック", "おむつ", 3980, 108, "sheet"
    ),
    DemoItem("dp-moony-m-64", "ムーニーマン エアフィット M 64枚", "おむつ", 1680, 64, "sheet"),
)
# fmt: on
_LIST_PRICE = {item.code: item.price for item in CATALOGUE}


def set_product(
    code: str, *, price: int | None = None, in_stock: bool | None = None
) -> DemoProduct:
    """Change one demo product's price and/or stock."""
    if price is not None and not 1 <= price <= 10_000_000:
        raise ValueError("price must be between ¥1 and ¥10,000,000")
    try:
        product = DemoProduct.objects.get(item_code=code)
    except DemoProduct.DoesNotExist:
        raise LookupError(f"no demo product {code!r} (see `demo_market list`)") from None
    if price is not None:
        product.price = price
    if in_stock is not None:
        product.in_stock = in_stock
    product.save()
    return product


# The market's moods, per product and tick. A sale is a price below 92 % of the list price;
# everyday wobbles never go that low, so a sale is always a real event.
_SALE_STARTS = 0.08
_SALE_ENDS = 0.3
_SELLS_OUT = 0.03
_RESTOCKS = 0.35
_WOBBLES = 0.3
_SALE_BELOW = 0.92


@dataclass(frozen=True)
class Move:
    """One product's change in one tick."""

    code: str
    what: str  # sale, sale over, wobble, sold out, restocked
    old_price: int
    new_price: int
    in_stock: bool


def tick(rng: random.Random | None = None) -> list[Move]:
    """Move the demo market one step: a random walk of the catalogue's prices around their
    list price (sales that start and end, small wobbles pulled back to the list price) and
    of their stock (rare stock-outs, quick recoveries). Products staff gave a simulated fault
    and products outside the catalogue stay as staff left them. Returns what moved."""
    rng = rng or random.Random()
    products = DemoProduct.objects.filter(item_code__in=_LIST_PRICE, fault="").order_by("item_code")
    moves: list[Move] = []
    changed: list[DemoProduct] = []
    now = timezone.now()
    for product in products:
        move = _step(product, _LIST_PRICE[product.item_code], rng)
        if move is not None:
            product.updated_at = now
            moves.append(move)
            changed.append(product)
    DemoProduct.objects.bulk_update(changed, ["price", "in_stock", "updated_at"])
    return moves


def _step(product: DemoProduct, list_price: int, rng: random.Random) -> Move | None:
    old = product.price
    if not product.in_stock:
        if rng.random() >= _RESTOCKS:
            return None
        product.in_stock = True
        return Move(product.item_code, "restocked", old, old, True)
    if rng.random() < _SELLS_OUT:
        product.in_stock = False
        return Move(product.item_code, "sold out", old, old, False)
    if old < list_price * _SALE_BELOW:
        if rng.random() >= _SALE_ENDS:
            return None
        product.price = round(list_price * rng.uniform(0.97, 1.03))
        return Move(product.item_code, "sale over", old, product.price, True)
    if rng.random() < _SALE_STARTS:
        product.price = round(list_price * rng.uniform(0.72, 0.88))
        return Move(product.item_code, "sale", old, product.price, True)
    if rng.random() >= _WOBBLES:
        return None
    wobbled = old * rng.uniform(0.985, 1.015)
    pulled = wobbled + 0.2 * (list_price - wobbled)  # back towards the list price
    low, high = list_price * (_SALE_BELOW + 0.01), list_price * 1.1
    new = round(min(max(pulled, low), high))
    if new == old:
        return None
    product.price = new
    return Move(product.item_code, "wobble", old, new, True)


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
            price = max(1, round(price * rng.uniform(0.985, 1.015)))
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
    notifications go to the console. Idempotent: running it again adds nothing."""
    now = now or timezone.now()
    created = {"products": 0, "listings": 0, "price_points": 0, "watches": 0}
    for index, item in enumerate(CATALOGUE):
        history = _history(item, now, on_sale=index % 4 == 0)
        product, made = DemoProduct.objects.get_or_create(
            item_code=item.code,
            defaults={
                "name": item.name,
                "category": item.category,
                "price": history[-1][1],
                "shipping": item.shipping,
                "units_per_pack": item.units,
                "unit_label": item.unit_label,
            },
        )
        created["products"] += made
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
                "last_polled_at": now,
            },
        )
        created["listings"] += made
        if not listing.price_points.exists():
            PricePoint.objects.bulk_create(
                PricePoint(
                    listing=listing,
                    observed_at=at,
                    price=price,
                    shipping=item.shipping,
                    in_stock=ok,
                )
                for at, price, ok in history
            )
            created["price_points"] += len(history)
    created["watches"] = _seed_demo_watcher()
    refresh_stats(Listing.objects.filter(source="demo").values_list("id", flat=True), now)
    return created


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
    ]
    made = 0
    for code, trigger, params in wanted:
        listing = Listing.objects.get(source="demo", item_code=code)
        _, was_made = Watch.objects.get_or_create(
            device=device, listing=listing, trigger=trigger, removed_at=None, defaults=params
        )
        made += was_made
    return made
