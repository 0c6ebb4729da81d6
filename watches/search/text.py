"""The text search looks in, and the folding that makes a query meet it.

`fold` brings what a person types and what a listing says to one form: NFKC (full-width Latin
and half-width katakana to their usual forms), lower case, katakana to hiragana, and the
separators people leave out (・, 〜) out or to the long-vowel mark. A listing's search text is
its folded name, the name's reading in hiragana and in romaji (pykakasi, so せんざい and
senzai find 洗剤), its category in both languages (and read aloud) with the words people use
for it, and the
Latin names of the brands it mentions (watches.search.vocabulary); and each of those in its
loose form (`loose`), where near misses meet. A query matches when each of its words is a
substring of that text.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from watches.search import vocabulary

MAX_QUERY = 100
# Katakana ァ..ヶ sit 0x60 above hiragana ぁ..ゖ.
_KATAKANA_TO_HIRAGANA = {code: code - 0x60 for code in range(0x30A1, 0x30F7)}
_SEPARATORS = str.maketrans({"・": "", "〜": "ー", "~": "ー"})
# What a name written from memory most often loses or gains: the small tsu and the long vowel
# (スコティ for スコッティ, パンパス for パンパース), a small vowel written large (テイ for ティ),
# voiced marks that sound alike; in Latin letters, a doubled letter and a hyphen.
_LOOSE = str.maketrans(
    {
        "っ": "",
        "ー": "",
        "-": "",
        **dict(zip("ぁぃぅぇぉゃゅょゎゕゖ", "あいうえおやゆよわかけ", strict=True)),
        "ゔ": "ぶ",
        "ぢ": "じ",
        "づ": "ず",
    }
)
_DOUBLED_LATIN = re.compile(r"([a-z])\1+")


def fold(text: str) -> str:
    """The form both sides of a search are compared in (see the module's docstring)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return folded.translate(_KATAKANA_TO_HIRAGANA).translate(_SEPARATORS)


def loose(folded: str) -> str:
    """`folded` (see `fold`) without what a near miss gets wrong (`_LOOSE`): the form in which
    スコティ and スコッティ, or scotie and scottie, are one word. The search text carries it, so
    the trigram index finds near misses too (`watches.search.near`)."""
    return _DOUBLED_LATIN.sub(r"\1", folded.translate(_LOOSE))


def query_terms(query: str) -> list[str]:
    """The folded words of a query (at most MAX_QUERY characters of it), each of which a
    listing's search text must contain."""
    return fold(unicodedata.normalize("NFKC", query).strip()[:MAX_QUERY]).split()


def for_listing(name: str, category: str) -> str:
    """A listing's search text, from its name and category."""
    folded = fold(name)
    parts = [folded]
    hiragana, romaji = _readings(name)
    parts += [hiragana, romaji]
    parts += [fold(word) for word in vocabulary.category_words(category)]
    parts += _readings(category)
    parts += [latin for brand, latin in _folded_brands() if brand in folded]
    parts += [loose(part) for part in parts]
    seen: list[str] = []
    for part in parts:
        if part and part not in seen:
            seen.append(part)
    return " | ".join(seen)


@functools.cache
def _folded_brands() -> tuple[tuple[str, str], ...]:
    return tuple((fold(brand), latin) for brand, latin in vocabulary.BRANDS.items())


@functools.cache
def _kakasi():
    # Loaded on first use (about a second): the pages' search itself never needs it.
    import pykakasi

    return pykakasi.kakasi()


def _readings(name: str) -> tuple[str, str]:
    """The name read aloud: in hiragana and in Hepburn romaji, folded."""
    if name.isascii():
        return "", ""
    words = _kakasi().convert(unicodedata.normalize("NFKC", name))
    hiragana = fold("".join(word["hira"] for word in words))
    romaji = fold("".join(word["hepburn"] for word in words))
    return hiragana, romaji
