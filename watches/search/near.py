"""Near misses: when a search finds nothing, the name it nearly found ("did you mean …").

Each word of the query that finds nothing on its own is compared, by trigrams, with the words
of the listings the search index ranks nearest to it (`index.nearest_matches`: FTS5 on
SQLite, pg_trgm on PostgreSQL), both in their loose form (`text.loose`), where スコティ and
スコッティ are one word: the words of their names, the Latin names of the brands they
mention, their category's words. The nearest word close enough takes its place; the query so
mended is suggested when it finds something.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection

from watches.models import Listing
from watches.search import vocabulary
from watches.search.index import first_matches, nearest_matches
from watches.search.text import MAX_QUERY, fold, loose, query_terms

# The share of trigrams two words must have in common (of all either has, each padded as
# pg_trgm pads it) to be taken for one another: pg_trgm's own default.
MIN_SIMILARITY = 0.3
# Listings the index ranks nearest, whose words are compared.
CANDIDATES = 50


@dataclass(frozen=True)
class Suggestion:
    query: str  # the query with each word that found nothing replaced by its nearest
    replaced: tuple[tuple[str, str], ...]  # (as typed, its nearest)


def suggest(query: str, category: str = "") -> Suggestion | None:
    """The query mended word by word (each word that finds nothing replaced by the nearest
    word of a listing), when it then finds something; None otherwise."""
    typed = unicodedata.normalize("NFKC", query).strip()[:MAX_QUERY].split()
    mended, replaced = [], []
    for word in typed:
        terms = query_terms(word)
        if not terms or first_matches(connection, terms, category, 1):
            mended.append(word)
            continue
        near = nearest(word, category)
        if near is None:
            return None
        mended.append(near)
        replaced.append((word, near))
    if not replaced:
        return None
    suggestion = " ".join(mended)
    if not first_matches(connection, query_terms(suggestion), category, 1):
        return None
    return Suggestion(suggestion, tuple(replaced))


def nearest(word: str, category: str = "") -> str | None:
    """The word of a listing nearest to `word` as typed (as the listing writes it), or None
    when none is near enough."""
    target = loose(fold(word))
    ids = nearest_matches(connection, target, category, CANDIDATES)
    listings = Listing.objects.filter(id__in=ids).values_list("name", "category")
    best: tuple[float, int, str] | None = None
    for name, listing_category in listings:
        for shown, key in _words(name, listing_category):
            score = similarity(target, key)
            # The nearer first; at the same distance the closer in length.
            rank = (score, -abs(len(key) - len(target)), shown)
            if score >= MIN_SIMILARITY and (best is None or rank > best):
                best = rank
    return best[2] if best else None


def similarity(a: str, b: str) -> float:
    """The trigrams two words share, of all either has (each padded as pg_trgm pads a word:
    two spaces before, one after)."""
    mine, theirs = _trigrams(a), _trigrams(b)
    return len(mine & theirs) / len(mine | theirs) if mine | theirs else 0.0


def _trigrams(word: str) -> set[str]:
    padded = f"  {word} "
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


def _words(name: str, category: str) -> Iterator[tuple[str, str]]:
    """(the word as a listing shows it, its loose form) for each word a listing can be
    found by: those of its name, its brands' Latin names, its category's words."""
    folded = fold(name)
    shown = unicodedata.normalize("NFKC", name).split()
    shown += [latin for brand, latin in vocabulary.BRANDS.items() if fold(brand) in folded]
    shown += vocabulary.category_words(category)
    for phrase in shown:
        for part in phrase.split():
            yield part, loose(fold(part))
