"""Fourteen queries a shopper types into the search box, against the demo catalogue, each with
what the page must show: exactly these listings (a product once, by its first shop's
listing), its product's page for a JAN code, and for a near miss the name it nearly found
("did you mean …") with that name's results. On SQLite (FTS5 trigram) and PostgreSQL
(pg_trgm) alike."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from demo.catalogue import CATALOGUE
from watches.models import Product
from watches.search.near import nearest, similarity, suggest

pytestmark = pytest.mark.django_db

TP = {"tp-scottie-12r", "tp-nepia-18r", "tp-elleair-24r"}
COFFEE = {"cf-ucc-golden-1k", "cf-key-drip-40", "cf-nescafe-gold-120", "cf-boss-can-24"}
CAT_FOOD = {"pf-chao-churu-60", "pf-canin-indoor-4k"}
DIAPERS = {"dp-merries-l-108", "dp-moony-m-64"}
SCOTTIE_JAN = next(item.jan for item in CATALOGUE if item.code == "tp-scottie-12r")

# what is typed -> (the listings shown, the name suggested when nothing matched as typed)
QUERIES: dict[str, tuple[set[str], str | None]] = {
    "トイレットペーパー": (TP, None),
    "スコッティ": ({"tp-scottie-12r"}, None),
    "スコティ": ({"tp-scottie-12r"}, "スコッティ"),  # a common misspelling
    "kleenx": ({"ts-kleenex-5p"}, "kleenex"),  # a typo
    "ジプロック": ({"kt-ziploc-l-60"}, "ジップロック"),
    "食器用洗剤": ({"dt-joy-1l"}, None),
    "コーヒー": (COFFEE, None),
    "猫 えさ": (CAT_FOOD, None),  # everyday words for cat food
    "キャットフード": (CAT_FOOD, None),  # that category, not dog food or pet sheets
    "ドッグフード": ({"pf-pedigree-8k"}, None),
    "ちゅーる": ({"pf-chao-churu-60"}, None),
    "ティッシュ": ({"ts-kleenex-5p"}, None),
    "水 2l": ({"wt-suntory-2l-9"}, None),
    "おむつ": (DIAPERS, None),
}


@pytest.fixture
def catalogue():
    call_command("seed_demo", verbosity=0)


def test_there_are_fourteen_queries_and_a_jan_code():
    assert len(QUERIES) + 1 == 15


def test_each_query_shows_what_a_shopper_looks_for(client, catalogue):
    # One catalogue for the whole table (seeding it per query would take a minute).
    wrong = {}
    for query, (expected, suggested) in QUERIES.items():
        response = client.get("/", {"q": query})
        shown = {row.listing.item_code for row in response.context["rows"]}
        suggestion = response.context["suggestion"]
        said = suggestion.query if suggestion else None
        if shown != expected or said != suggested:
            wrong[query] = {"shown": shown, "expected": expected, "suggested": said}
    assert wrong == {}


def test_a_jan_code_in_the_search_box_opens_its_product(client, catalogue):
    product = Product.objects.get(jan=SCOTTIE_JAN)
    spaced = f" {SCOTTIE_JAN[:7]}-{SCOTTIE_JAN[7:]} "
    for typed in (SCOTTIE_JAN, spaced, "４９０１７５０４０４４０６"):
        response = client.get("/", {"q": typed})
        assert response.status_code == 302, typed
        assert response["Location"] == f"/products/{product.pk}/"


def test_an_unknown_jan_code_offers_the_jan_form_filled_in(client, catalogue):
    body = client.get("/", {"q": "4902102072618"}).content.decode()
    assert "No product with the JAN code 4902102072618 is here yet." in body
    assert '<a href="#add-jan">' in body
    assert '<details class="card add" id="add-jan" open>' in body
    assert 'name="jan" value="4902102072618"' in body
    assert "add the item by its link" not in body


def test_a_mistyped_jan_code_says_what_is_wrong_next_to_the_form(client, catalogue):
    body = client.get("/", {"q": "4901750404408"}).content.decode()
    assert '<details class="card add" id="add-jan" open>' in body
    assert "last digit does not match" in body


def test_the_suggestion_is_said_and_links_to_its_search(client, catalogue):
    body = client.get("/", {"q": "スコティ"}).content.decode()
    assert "Nothing matches “スコティ”." in body
    assert 'Did you mean <a href="/?q=%E3%82%B9%E3%82%B3%E3%83%83%E3%83%86%E3%82%A3">' in body


def test_a_query_far_from_every_name_suggests_nothing(client, catalogue):
    assert suggest("xyzzy plugh") is None
    assert nearest("ほげほげ") is None
    assert nearest("メリーツ") == "メリーズ", "one letter off, at the start of a word"
    body = client.get("/", {"q": "xyzzy"}).content.decode()
    assert "Nothing matches “xyzzy”. Try a shorter word" in body
    assert "Did you mean" not in body


def test_a_suggestion_keeps_the_words_that_matched(catalogue):
    found = suggest("スコティ 12ロール")
    assert found is not None and found.query == "スコッティ 12ロール"
    assert found.replaced == (("スコティ", "スコッティ"),)


def test_a_suggestion_stays_in_the_chosen_category(catalogue):
    assert suggest("kleenx", category="ティッシュ").query == "kleenex"
    assert suggest("kleenx", category="コーヒー") is None


def test_similarity_counts_padded_trigrams_as_pg_trgm_does():
    assert similarity("すこてい", "すこてい") == 1.0
    # "  k", " kl", "kle", "len" shared; "enx", "nx ", "ene", "nex", "ex " not
    assert similarity("klenx", "klenex") == pytest.approx(4 / 9)
    assert similarity("abc", "xyz") == 0.0


def test_near_misses_are_found_through_the_search_index(catalogue):
    from django.db import connection

    from watches import sql

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            statement = sql.NEAR_BY_INDEX + sql.NEAR_BY_INDEX_ORDER
            cursor.execute("EXPLAIN QUERY PLAN " + statement, ['" すこ" OR "すこて"', 50])
            assert "VIRTUAL TABLE INDEX" in " ".join(str(row) for row in cursor.fetchall())
            return
        # 36 listings: the planner rightly reads them all, or takes the small index of those
        # not paused; the question is whether the trigram index can answer the similarity.
        cursor.execute("SET enable_seqscan = off")
        try:
            similar = sql.NEAR_BY_SIMILARITY.replace("NOT l.paused AND ", "")
            cursor.execute("EXPLAIN " + similar, ["すこてい"])
            plan = " ".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("SET enable_seqscan = on")
    assert sql.PG_INDEX in plan


@pytest.mark.postgres
def test_postgresql_near_misses_leave_the_similarity_setting_as_they_found_it(catalogue):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET pg_trgm.word_similarity_threshold = 0.55")
        assert nearest("スコティ") == "スコッティ"
        cursor.execute("SHOW pg_trgm.word_similarity_threshold")
        assert cursor.fetchone()[0] == "0.55"
