"""The demo marketplace's catalogue: everyday consumables at their list prices, the prices the
demo market wanders around."""

from __future__ import annotations

from dataclasses import dataclass, replace

from watches.products.jan import check_digit


@dataclass(frozen=True)
class DemoItem:
    code: str
    name: str
    category: str
    price: int
    units: int | None
    unit_label: str
    shipping: int | None = 0
    jan: str = ""
    shop: str = "Yasugoro Demo Shop"


def _jan(body: str) -> str:
    """A made-up JAN-13 with its check digit (the demo's products are not real ones)."""
    return body + str(check_digit(body))


# fmt: off
_ITEMS: tuple[DemoItem, ...] = (
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
        "pf-chao-churu-60", "いなば CIAO ちゅ〜る まぐろ 14g×60本", "キャットフード", 1980, 60, "pc"
    ),
    DemoItem(
        "pf-canin-indoor-4k",
        "ロイヤルカナン インドア 成猫用 4kg",
        "キャットフード",
        7480,
        4000,
        "g",
        500,
    ),
    DemoItem(
        "pf-pedigree-8k",
        "ペディグリー 成犬用 旨みビーフ&緑黄色野菜 8kg",
        "ドッグフード",
        3280,
        8000,
        "g",
    ),
    DemoItem(
        "pf-unicharm-sheet-100",
        "ユニ・チャーム デオシート 厚型 レギュラー 100枚",
        "ペットシーツ",
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

# Products sold by several demo shops: the item above (the first shop), then the others'
# offers — (shop, price, shipping: 0 free, None unknown) — so the product page, "from ¥X at
# N shops" and product watches have something to show under `make run`.
_SHOPS: dict[str, tuple[str, tuple[tuple[str, int, int | None], ...]]] = {
    "tp-scottie-12r": (
        _jan("490175040440"),
        (
            ("ドラッグさくら", 568, 0),
            ("日用品マート", 548, 350),
            ("まとめ買い本舗", 530, None),
            ("くらしの店", 612, 0),
        ),
    ),
    "dt-attack-zero-2k": (
        _jan("490130107765"),
        (("ドラッグさくら", 1248, 0), ("日用品マート", 1180, 500), ("洗剤のヤマ", 1320, 0)),
    ),
    "cf-ucc-golden-1k": (
        _jan("490120116452"),
        (("珈琲問屋", 1490, 0), ("日用品マート", 1420, 650), ("くらしの店", 1620, None)),
    ),
    "pf-chao-churu-60": (
        _jan("490160910143"),
        (("ペットのさくら", 1880, 0), ("日用品マート", 1790, 600)),
    ),
}


def _with_shops(items: tuple[DemoItem, ...]) -> tuple[DemoItem, ...]:
    result: list[DemoItem] = []
    for item in items:
        jan, others = _SHOPS.get(item.code, ("", ()))
        result.append(replace(item, jan=jan))
        for number, (shop, price, shipping) in enumerate(others, start=2):
            code = f"{item.code}-s{number}"
            result.append(
                replace(item, code=code, price=price, shipping=shipping, jan=jan, shop=shop)
            )
    return tuple(result)


CATALOGUE: tuple[DemoItem, ...] = _with_shops(_ITEMS)
LIST_PRICE = {item.code: item.price for item in CATALOGUE}


# The demo shops' points, so `make run` shows prices after points without keys. A campaign:
# (multiplier, hours from the seed it started — negative: before —, hours it runs). One is on
# (it ends tomorrow), one ended yesterday, one starts later today; the demo tick starts and
# ends others as it goes (`demo.market.tick_campaigns`).
CAMPAIGNS: dict[str, tuple[int, int, int]] = {
    "ドラッグさくら": (5, -6, 30),
    "くらしの店": (10, -48, 24),
    "まとめ買い本舗": (3, 6, 48),
}
# What premium members get on top, as a multiplier (as Yahoo! Shopping's LYP premium): shown
# to everyone, counted only for a device that says it is a member.
MEMBER_RATES: dict[str, int] = {"日用品マート": 2}
