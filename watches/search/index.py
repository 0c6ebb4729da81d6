"""The index that serves substring search over `Listing.search_text` at scale.

- SQLite: an FTS5 table with the trigram tokenizer over the listing table (external content,
  kept current by three triggers). A word of three or more characters is a phrase MATCH; a
  shorter one a LIKE on the same table (FTS5 answers it, by a scan of the index).
- PostgreSQL: pg_trgm and a GIN index on `search_text gin_trgm_ops`, which serves `LIKE
  '%word%'` for words of three or more characters.

`install()` creates whatever is missing, idempotently; the migration calls it, and so does
every `migrate` afterwards (post_migrate): on SQLite, Django rebuilds a table to alter it and
the triggers go with the old table — `install()` puts them back and re-indexes.
"""

from __future__ import annotations

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from watches.sql import (
    FIRST_BY_INDEX,
    FIRST_BY_SCAN,
    FIRST_MATCHING_OFFER,
    FTS,
    FTS_TRIGGERS,
    IN_CATEGORY,
    LIKE_ESCAPE,
    MATCH_FTS,
    NEAR_BY_INDEX,
    NEAR_BY_INDEX_ORDER,
    NEAR_BY_SIMILARITY,
    NEAR_BY_SIMILARITY_ORDER,
    PG_INDEX,
    PG_RANDOM_PAGE_COST,
    PG_WORD_SIMILARITY,
    REBUILD_FTS,
    TABLE,
)


def install(connection: BaseDatabaseWrapper) -> bool:
    """Create the index where it is missing. True when something was (re)created."""
    if connection.vendor == "sqlite":
        return _install_sqlite(connection)
    if connection.vendor == "postgresql":
        return _install_postgresql(connection)
    return False


def uninstall(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for name in FTS_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
            cursor.execute(f"DROP TABLE IF EXISTS {FTS}")
        elif connection.vendor == "postgresql":
            cursor.execute(f"DROP INDEX IF EXISTS {PG_INDEX}")


def _install_sqlite(connection: BaseDatabaseWrapper) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, name FROM sqlite_master WHERE name = %s OR (type = 'trigger' AND "
            "tbl_name = %s)",
            [FTS, TABLE],
        )
        present = {name for _, name in cursor.fetchall()}
        missing = [name for name in FTS_TRIGGERS if name not in present]
        if FTS in present and not missing:
            return False
        if FTS not in present:
            cursor.execute(
                f"CREATE VIRTUAL TABLE {FTS} USING fts5(search_text, content='{TABLE}', "
                "content_rowid='id', tokenize='trigram')"
            )
        for name in missing:
            cursor.execute(FTS_TRIGGERS[name])
        # Whatever was written while a trigger was missing is indexed now.
        cursor.execute(REBUILD_FTS)
    return True


def _install_postgresql(connection: BaseDatabaseWrapper) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [PG_INDEX])
        if cursor.fetchone():
            return False
        # A trusted extension (PostgreSQL 13+): the database's owner may create it.
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {PG_INDEX} ON {TABLE} USING gin (search_text gin_trgm_ops)"
        )
    return True


def matching(queryset: QuerySet, terms: list[str], vendor: str) -> QuerySet:
    """`queryset` narrowed to listings whose search text contains every one of `terms`
    (already folded: watches.search.text.query_terms)."""
    if vendor == "sqlite":
        long = [term for term in terms if len(term) >= 3]
        if long:
            phrases = " AND ".join('"' + term.replace('"', '""') + '"' for term in long)
            queryset = queryset.filter(
                id__in=RawSQL(MATCH_FTS, [phrases])  # noqa: S611 (the words go as a parameter)
            )
        terms = [term for term in terms if len(term) < 3]
    for term in terms:
        queryset = queryset.filter(search_text__contains=term)
    return queryset


def first_matches(
    connection: BaseDatabaseWrapper, terms: list[str], category: str, limit: int
) -> list[int]:
    """Ids of at most `limit` active listings whose search text contains every one of
    `terms` (already folded) — in `category` when one is given — in whatever order the index
    yields them: it stops at `limit` instead of finding every match. A product is found when
    any of its active offers matches, once: as the first of them that matches."""
    escape = LIKE_ESCAPE.get(connection.vendor, "")

    def match(alias: str) -> str:
        words = f" AND {alias}.search_text LIKE %s{escape}" * len(terms)
        return words + (f" AND {alias}.category = %s" if category else "")

    params: list = ["%" + connection.ops.prep_for_like_query(term) + "%" for term in terms]
    if category:
        params.append(category)
    # The match on the listing, and again on its product's offers: the first that matches
    # stands for the product.
    where = [match("l"), FIRST_MATCHING_OFFER.format(match=match("o"))]
    params = [*params, *params]
    long = [term for term in terms if len(term) >= 3]
    if connection.vendor == "sqlite" and long:
        # The trigram index finds the rows; the LIKEs, kept for every word, check only those
        # (and serve the words too short for trigrams).
        phrases = " AND ".join('"' + term.replace('"', '""') + '"' for term in long)
        sql, params = FIRST_BY_INDEX + "".join(where), [phrases, *params]
    else:
        # PostgreSQL's GIN index serves the LIKEs themselves.
        sql = FIRST_BY_SCAN + "".join(where)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT current_setting('random_page_cost'), "
                "set_config('random_page_cost', %s, true)",
                [PG_RANDOM_PAGE_COST],
            )
            before = cursor.fetchone()[0]
        cursor.execute(sql + " LIMIT %s", [*params, limit])
        ids = [row[0] for row in cursor.fetchall()]
        if connection.vendor == "postgresql":
            # Inside a caller's transaction the setting would outlive this statement.
            cursor.execute("SELECT set_config('random_page_cost', %s, true)", [before])
    return ids


def nearest_matches(
    connection: BaseDatabaseWrapper, word: str, category: str, limit: int
) -> list[int]:
    """Ids of at most `limit` active listings (in `category` when one is given) whose search
    text shares the most trigrams with `word` (folded, and in its loose form: three
    characters or more), best first, found through the index: FTS5's ranking of any of the
    word's trigrams on SQLite, pg_trgm's word similarity on PostgreSQL. The word's trigrams are
    padded with a space on each side, as pg_trgm pads words."""
    if len(word) < 3:
        return []
    category_sql, category_params = (IN_CATEGORY, [category]) if category else ("", [])
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            # Padded as pg_trgm pads a word (FTS5 indexes the spaces between words too).
            padded = f" {word} "
            trigrams = sorted({padded[i : i + 3] for i in range(len(padded) - 2)})
            phrases = " OR ".join('"' + tri.replace('"', '""') + '"' for tri in trigrams)
            cursor.execute(
                NEAR_BY_INDEX + category_sql + NEAR_BY_INDEX_ORDER,
                [phrases, *category_params, limit],
            )
            return [row[0] for row in cursor.fetchall()]
        # Missing (None) until pg_trgm is first used in the session.
        cursor.execute(
            "SELECT current_setting('pg_trgm.word_similarity_threshold', true), "
            "set_config('pg_trgm.word_similarity_threshold', %s, true)",
            [PG_WORD_SIMILARITY],
        )
        before = cursor.fetchone()[0]
        cursor.execute(
            NEAR_BY_SIMILARITY + category_sql + NEAR_BY_SIMILARITY_ORDER,
            [word, *category_params, word, limit],
        )
        ids = [row[0] for row in cursor.fetchall()]
        # Inside a caller's transaction the setting would outlive this statement.
        if before:
            cursor.execute(
                "SELECT set_config('pg_trgm.word_similarity_threshold', %s, true)", [before]
            )
        else:
            cursor.execute("RESET pg_trgm.word_similarity_threshold")
    return ids
