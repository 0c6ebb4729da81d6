"""Words people use for what we sell: category names in both languages with the English (and
other Japanese) words a person may type for each, and the Latin spelling of brands that
Japanese listings write in katakana. Search indexes these beside a listing's name; the pages
show a category under its name in the reader's language."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import translation
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


@dataclass(frozen=True)
class Category:
    label: Promise  # the name the pages show, translated (Japanese: the stored name)
    words: tuple[str, ...]  # what a person may type for it, in either language


# What people call food for any pet: its everyday words (えさ, 餌: feed) included.
_PET_FOOD = ("pet food", "ペットフード", "pet", "ペット", "えさ", "餌", "ごはん")

# Keyed by the category as listings store it (the marketplace's Japanese name).
CATEGORIES: dict[str, Category] = {
    "トイレットペーパー": Category(
        _("Toilet paper"), ("toilet paper", "toilet roll", "loo roll", "トイレ")
    ),
    "ティッシュ": Category(
        _("Tissues"), ("tissue", "tissues", "facial tissue", "ティシュー", "ちり紙")
    ),
    "洗剤": Category(
        _("Detergent"),
        ("detergent", "laundry", "washing", "dish soap", "washing-up liquid", "洗濯", "食器用"),
    ),
    "コーヒー": Category(_("Coffee"), ("coffee", "珈琲", "ドリップ")),
    # Cat food, dog food and pet sheets are each their own category, so that a word for one
    # never finds the others; the words for what they share (pet food, feed) find both foods.
    "キャットフード": Category(
        _("Cat food"),
        (
            "cat food",
            "cat",
            "猫",
            "ねこ",
            "猫用",
            "キャット",
            "ねこのえさ",
            *_PET_FOOD,
        ),
    ),
    "ドッグフード": Category(
        _("Dog food"),
        ("dog food", "dog", "犬", "いぬ", "犬用", "ドッグ", "いぬのえさ", *_PET_FOOD),
    ),
    "ペットシーツ": Category(
        _("Pet sheets"),
        ("pet sheets", "pee pads", "puppy pads", "pet", "ペット", "ペットシート", "犬", "いぬ"),
    ),
    # A listing filed under pet food as a whole (a marketplace's wider category).
    "ペットフード": Category(_("Pet food"), _PET_FOOD),
    "シャンプー": Category(
        _("Shampoo and body wash"),
        ("shampoo", "body wash", "body soap", "ボディソープ", "ボディウォッシュ"),
    ),
    "飲料": Category(
        _("Drinks"),
        ("drinks", "drink", "beverages", "water", "mineral water", "飲み物", "ドリンク", "水"),
    ),
    "キッチン": Category(
        _("Kitchen"),
        ("kitchen", "cling film", "plastic wrap", "freezer bag", "zip bag", "台所", "ラップ"),
    ),
    "おむつ": Category(
        _("Diapers"), ("diapers", "diaper", "nappies", "nappy", "オムツ", "紙おむつ")
    ),
}

# Brands as Japanese listings write them, and as people type them in Latin letters.
BRANDS: dict[str, str] = {
    "スコッティ": "scottie",
    "ネピア": "nepia",
    "エリエール": "elleair",
    "クリネックス": "kleenex",
    "アタック": "attack",
    "アリエール": "ariel",
    "ボールド": "bold",
    "ジョイ": "joy",
    "キュキュット": "cucute",
    "レノア": "lenor",
    "ダウニー": "downy",
    "花王": "kao",
    "ライオン": "lion",
    "キーコーヒー": "key coffee",
    "ネスカフェ": "nescafe",
    "ネスレ": "nestle",
    "ブレンディ": "blendy",
    "サントリー": "suntory",
    "伊右衛門": "iyemon",
    "い・ろ・は・す": "i lohas ilohas",
    "クリスタルガイザー": "crystal geyser",
    "エビアン": "evian",
    "ボルヴィック": "volvic",
    "いなば": "inaba",
    "ちゅ〜る": "churu",
    "ロイヤルカナン": "royal canin",
    "ペディグリー": "pedigree",
    "カルカン": "kalkan",
    "モンプチ": "monpetit",
    "ピュリナ": "purina",
    "ユニ・チャーム": "unicharm uni-charm",
    "デオシート": "deo sheet",
    "メリット": "merit",
    "ビオレ": "biore",
    "サランラップ": "saran wrap",
    "ジップロック": "ziploc",
    "メリーズ": "merries",
    "ムーニー": "moony",
    "パンパース": "pampers",
    "グーン": "goo.n goon",
}


def category_label(name: str) -> str:
    """The category as the pages show it, in the active language; an unknown one as stored."""
    category = CATEGORIES.get(name)
    return str(category.label) if category else name


def category_words(name: str) -> tuple[str, ...]:
    """Every word that should find a listing of category `name`: the stored name, its
    English label (whatever language is active: the index must not depend on it) and the
    words people type for it."""
    category = CATEGORIES.get(name)
    if category is None:
        return (name,) if name else ()
    with translation.override("en"):
        english = str(category.label)
    return (name, english, *category.words)
