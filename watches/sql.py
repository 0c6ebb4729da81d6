"""The domain's hand-written SQL, each statement named for its query. Only what the ORM
cannot say is here: the search index (an FTS5 table and its triggers on SQLite, a pg_trgm
index on PostgreSQL) and the reads that go through it. Everything else in `watches` is the
ORM as documented (docs/decisions/0048-plain-django-over-benchmark-speed.md).

Literal SQL: the table and index names are spelled out, and nothing here is built from
outside input; every value goes in as a parameter.
"""

TABLE = "watches_listing"
FTS = "watches_listing_fts"
PG_INDEX = "watches_listing_search_trgm"
# Literal SQL (the names above, spelled out): nothing here comes from outside.
FTS_TRIGGERS = {
    "watches_listing_fts_ai": """CREATE TRIGGER watches_listing_fts_ai AFTER INSERT
        ON watches_listing BEGIN
        INSERT INTO watches_listing_fts(rowid, search_text) VALUES (new.id, new.search_text);
        END""",
    "watches_listing_fts_ad": """CREATE TRIGGER watches_listing_fts_ad AFTER DELETE
        ON watches_listing BEGIN
        INSERT INTO watches_listing_fts(watches_listing_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
        END""",
    "watches_listing_fts_au": """CREATE TRIGGER watches_listing_fts_au AFTER UPDATE OF search_text
        ON watches_listing BEGIN
        INSERT INTO watches_listing_fts(watches_listing_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
        INSERT INTO watches_listing_fts(rowid, search_text) VALUES (new.id, new.search_text);
        END""",
}
REBUILD_FTS = "INSERT INTO watches_listing_fts(watches_listing_fts) VALUES ('rebuild')"
MATCH_FTS = "SELECT rowid FROM watches_listing_fts WHERE watches_listing_fts MATCH %s"
# The index first, the listing row after, so the search stops at `limit` matches instead of
# collecting all of them before the LIMIT applies (as `id IN (SELECT rowid …)` would).
FIRST_BY_INDEX = (
    "SELECT l.id FROM watches_listing_fts f JOIN watches_listing l ON l.id = f.rowid "
    "WHERE watches_listing_fts MATCH %s AND NOT l.paused"
)
FIRST_BY_SCAN = "SELECT l.id FROM watches_listing l WHERE NOT l.paused"
# A product is found through any of its active offers, and stands once: as the first of them
# that matches (`{match}`: the match again, on `o`), as `search.search` gives it (the product
# link's index serves the subquery).
FIRST_MATCHING_OFFER = (
    " AND (l.product_id IS NULL OR l.id = (SELECT MIN(o.id) FROM watches_listing o"
    " WHERE o.product_id = l.product_id AND NOT o.paused{match}))"
)
# PostgreSQL prices a random page at 4 sequential ones (a spinning disk's ratio) and then
# prefers reading the whole table over the trigram index to find `limit` matches, several
# times slower with the table cached (docs/decisions/0013-search-by-trigram-over-folded-text.md).
# 1.1 is the usual figure for data in memory or on SSD; set for this one statement only.
PG_RANDOM_PAGE_COST = "1.1"
# Near misses (watches.search.near): the listings whose search text shares the most trigrams
# with a word that matched nothing, best first. SQLite: the FTS5 table's own ranking over any
# of the word's trigrams (an OR of them, each a phrase: a parameter); PostgreSQL: pg_trgm's
# word similarity, whose `<%` the GIN index serves, at the threshold set for the statement.
NEAR_BY_INDEX = (
    "SELECT l.id FROM watches_listing_fts f JOIN watches_listing l ON l.id = f.rowid "
    "WHERE watches_listing_fts MATCH %s AND NOT l.paused"
)
NEAR_BY_INDEX_ORDER = " ORDER BY f.rank LIMIT %s"
NEAR_BY_SIMILARITY = (
    "SELECT l.id FROM watches_listing l WHERE NOT l.paused AND %s <%% l.search_text"
)
NEAR_BY_SIMILARITY_ORDER = " ORDER BY word_similarity(%s, l.search_text) DESC, l.id LIMIT %s"
PG_WORD_SIMILARITY = "0.3"
IN_CATEGORY = " AND l.category = %s"
# Django's own `contains` lookup escapes %, _ and \ with a backslash; SQLite needs to be told.
LIKE_ESCAPE = {"sqlite": " ESCAPE '\\'"}
