"""Search finds what a person types, against the demo catalogue: hiragana, katakana,
half-width, full-width, kanji, English, romaji, and the category chips' own words in both
languages — each query with exactly the listings it must find. Also: the index it runs on
(SQLite FTS5 trigram / PostgreSQL pg_trgm) stays in step with the listings, and survives a
rebuilt table."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from tests.factories import ListingFactory
from watches.models import Listing, Product
from watches.search import index as search_index
from watches.search import query as search_module
from watches.search.query import search, search_results

pytestmark = pytest.mark.django_db

TP = {"tp-scottie-12r", "tp-nepia-18r", "tp-elleair-24r"}
DETERGENT = {"dt-attack-zero-2k", "dt-ariel-gel-12", "dt-joy-1l", "dt-bold-refill"}
COFFEE = {"cf-ucc-golden-1k", "cf-key-drip-40", "cf-nescafe-gold-120", "cf-boss-can-24"}
CAT_FOOD = {"pf-chao-churu-60", "pf-canin-indoor-4k"}
DOG_FOOD = {"pf-pedigree-8k"}
PET_SHEETS = {"pf-unicharm-sheet-100"}
WATER = {"wt-iroha-24", "wt-suntory-2l-9"}
DIAPERS = {"dp-merries-l-108", "dp-moony-m-64"}
REFILLS = {
    "dt-attack-zero-2k",
    "dt-joy-1l",
    "dt-bold-refill",
    "cf-nescafe-gold-120",
    "sh-merit-refill-2l",
    "sh-biore-u-refill",
}

# query -> the codes it must find, exactly
QUERIES: dict[str, set[str]] = {
    # a brand, every way it can be typed
    "すこってぃ": {"tp-scottie-12r"},  # hiragana
    "スコッティ": {"tp-scottie-12r"},  # katakana
    "ｽｺｯﾃｨ": {"tp-scottie-12r"},  # half-width katakana
    "ＳＣＯＴＴＩＥ": {"tp-scottie-12r"},  # full-width Latin
    "scottie": {"tp-scottie-12r"},  # its Latin name
    "Nepia": {"tp-nepia-18r"},
    "ねぴあ": {"tp-nepia-18r"},
    "kleenex": {"ts-kleenex-5p"},
    "ロイヤルカナン": {"pf-canin-indoor-4k"},
    "royal canin": {"pf-canin-indoor-4k"},
    "ジップロック": {"kt-ziploc-l-60"},
    "ziploc": {"kt-ziploc-l-60"},
    "いろはす": {"wt-iroha-24"},  # written い・ろ・は・す
    "ちゅーる": {"pf-chao-churu-60"},  # written ちゅ〜る
    "churu": {"pf-chao-churu-60"},
    "ciao": {"pf-chao-churu-60"},
    "boss": {"cf-boss-can-24"},
    "ＢＯＳＳ": {"cf-boss-can-24"},
    # words of the names
    "こーひー": COFFEE,
    "コーヒー": COFFEE,
    "ｺｰﾋｰ": COFFEE,
    "天然水": WATER,  # kanji
    "てんねんすい": WATER,  # its reading
    "tennensui": WATER,  # romaji
    "詰め替え": REFILLS,
    "つめかえ": REFILLS,
    "toiretto": TP,  # romaji of トイレット
    "12ロール": {"tp-scottie-12r"},
    "１２ロール": {"tp-scottie-12r"},  # full-width digits
    "coffee 1kg": {"cf-ucc-golden-1k"},  # every word must match
    # categories: the chips' own words, in both languages, and what people call them
    "トイレットペーパー": TP,
    "toilet paper": TP,
    "ティッシュ": {"ts-kleenex-5p"},
    "てぃっしゅ": {"ts-kleenex-5p"},
    "tissue": {"ts-kleenex-5p"},
    "洗剤": DETERGENT,
    "せんざい": DETERGENT,
    "detergent": DETERGENT,
    "COFFEE": COFFEE,
    "ＣＯＦＦＥＥ": COFFEE,
    "ペットフード": CAT_FOOD | DOG_FOOD,  # both foods, not the sheets
    "pet food": CAT_FOOD | DOG_FOOD,
    "キャットフード": CAT_FOOD,  # that category, not its neighbours
    "cat food": CAT_FOOD,
    "ドッグフード": DOG_FOOD,
    "dog food": DOG_FOOD,
    "ペットシーツ": PET_SHEETS,
    "猫 えさ": CAT_FOOD,  # everyday words
    "ねこ ごはん": CAT_FOOD,
    "犬 餌": DOG_FOOD,
    "pet": CAT_FOOD | DOG_FOOD | PET_SHEETS,
    "飲料": WATER,
    "drinks": WATER,
    "water": WATER,
    "おむつ": DIAPERS,
    "オムツ": DIAPERS,
    "diapers": DIAPERS,
    "shampoo": {"sh-merit-refill-2l", "sh-biore-u-refill"},
    "kitchen": {"kt-saran-wrap", "kt-ziploc-l-60"},
    # near misses written in the loose form the search text carries too
    "すこてい": {"tp-scottie-12r"},
    "scotie": {"tp-scottie-12r"},
    # nothing
    "nothing-like-this": set(),
    "洗剤 coffee": set(),
}


@pytest.fixture
def catalogue():
    call_command("seed_demo", verbosity=0)


def codes(query: str, category: str = "") -> set[str]:
    return set(search(query, category).values_list("item_code", flat=True))


def test_the_table_has_at_least_thirty_queries():
    assert len(QUERIES) >= 30


def test_each_query_finds_exactly_its_listings(catalogue):
    # One catalogue for the whole table (seeding it per query would take a minute).
    wrong = {}
    for query, expected in QUERIES.items():
        found = codes(query)
        if found != expected:
            wrong[query] = {"missing": expected - found, "extra": found - expected}
    assert wrong == {}


def test_the_home_page_finds_by_hiragana(client, catalogue):
    response = client.get("/", {"q": "すこってぃ"})
    assert [x.item_code for x in response.context["page"]] == ["tp-scottie-12r"]


def test_a_query_and_a_category_narrow_each_other(catalogue):
    assert codes("詰め替え", category="洗剤") == REFILLS & DETERGENT


def test_results_are_in_name_order(catalogue):
    names = list(search("coffee").values_list("name", flat=True))
    assert names == sorted(names)


def test_a_quote_or_an_operator_in_a_query_is_only_text(catalogue):
    for query in ('"', 'a"b', '"xx" OR "yy"', "*", "%", "_", "NEAR(x", "zz:yy", "xx^"):
        assert codes(query) == set(), query


def test_a_renamed_listing_is_found_by_its_new_name_only():
    listing = ListingFactory(name="ネスカフェ エクセラ", category="コーヒー")
    assert codes("えくせら") == {listing.item_code}
    listing.name = "ブレンディ スティック"
    listing.save(update_fields=["name"])
    assert codes("えくせら") == set()
    assert codes("blendy") == {listing.item_code}


def test_a_deleted_listing_leaves_the_index(catalogue):
    # Every demo shop's offer of it (one product, several shops).
    Listing.objects.filter(item_code__startswith="tp-scottie-12r").delete()
    assert codes("scottie") == set()


def test_a_products_offers_are_found_once_as_its_first_offer(catalogue):
    assert Listing.objects.filter(item_code__startswith="tp-scottie-12r").count() == 5
    assert codes("scottie") == {"tp-scottie-12r"}


def test_a_product_is_found_through_any_active_offer_once_as_the_first_that_matches():
    product = Product.objects.create(jan="4901750404406", name="スコッティ 12ロール")
    first, other, paused = (
        ListingFactory(name="トイレットペーパー 12ロール", category=""),
        ListingFactory(name="スコッティ 12ロール", category="トイレットペーパー"),
        ListingFactory(name="スコッティ 12ロール 限定", category="ティッシュ", paused=True),
    )
    Listing.objects.filter(pk__in=[first.pk, other.pk, paused.pk]).update(product=product)
    for query, category, stands in (
        ("スコッティ", "", other),  # not its first offer's name
        ("", "トイレットペーパー", other),  # not its first offer's category
        ("すこってぃ", "トイレットペーパー", other),
        ("12ロール", "", first),  # both: once
    ):
        assert codes(query, category) == {stands.item_code}, (query, category)
        assert page_codes(query, category) == {stands.item_code}, (query, category)
        assert search_results(query, category).found == 1
    # A paused offer is not tracked: it finds nothing.
    assert codes("限定") == page_codes("限定") == set()
    assert codes("", "ティッシュ") == page_codes("スコッティ", "ティッシュ") == set()


def test_install_is_idempotent_and_repairs_missing_triggers(catalogue):
    assert search_index.install(connection) is False, "the migration installed it"
    if connection.vendor != "sqlite":
        pytest.skip("triggers are the SQLite side")
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {search_index.FTS}_ai")  # as a table rebuild would
    late = ListingFactory(name="ムーニー ナイト", category="おむつ")
    assert late.item_code not in codes("ないと")
    assert search_index.install(connection) is True
    assert codes("ないと") == {late.item_code}


@pytest.mark.postgres
def test_postgresql_serves_long_words_from_the_trigram_index(catalogue):
    # 24 listings: the planner would rightly scan; the question is whether it can use it.
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
    try:
        plan = search_index.matching(Listing.objects.all(), ["toilet"], "postgresql").explain()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = on")
    assert search_index.PG_INDEX in plan


def page_codes(query: str, category: str = "") -> set[str]:
    return set(search_results(query, category).listings.values_list("item_code", flat=True))


def test_the_page_s_capped_search_finds_exactly_what_search_finds(catalogue):
    wrong = {
        query: page_codes(query) ^ expected
        for query, expected in QUERIES.items()
        if page_codes(query) != expected
    }
    assert wrong == {}
    assert page_codes("詰め替え", category="洗剤") == REFILLS & DETERGENT


def test_a_search_counts_to_the_cap_and_says_there_are_more(client, monkeypatch):
    monkeypatch.setattr(search_module, "SEARCH_CAP", 3)
    for n in range(5):
        ListingFactory(name=f"ちゅーる まぐろ {n}", category="ペットフード")
    found = search_results("ちゅーる")
    names = list(found.listings.values_list("name", flat=True))
    assert found.more is True
    assert len(names) == 3
    assert names == sorted(names)
    body = client.get("/", {"q": "ちゅーる"}).content.decode()
    assert '<span class="count">(3+)</span>' in body
    assert "More than 3 match" in body
    monkeypatch.setattr(search_module, "SEARCH_CAP", 5)
    assert search_results("ちゅーる").more is False
    assert "More than" not in client.get("/", {"q": "ちゅーる"}).content.decode()


def test_like_wildcards_in_a_capped_search_are_only_text():
    ListingFactory(name="ジョイ 詰め替え 2本")
    ListingFactory(name="ジョイ 50%増量")
    for query in ("%", "_", "50%", "\\", "2_"):
        assert page_codes(query) == set(search(query).values_list("item_code", flat=True))
    assert len(page_codes("50%")) == 1


@pytest.mark.postgres
def test_postgresql_search_leaves_the_planner_setting_as_it_found_it(catalogue):
    with connection.cursor() as cursor:
        cursor.execute("SHOW random_page_cost")
        before = cursor.fetchone()[0]
        page_codes("toilet")
        cursor.execute("SHOW random_page_cost")
        assert cursor.fetchone()[0] == before
