"""What a newcomer sees in Chromium: category chips in the page's language, one brand in
every page title of a language, a unit price that never breaks inside a word at 1280 px, and search
that finds hiragana and English words."""

from __future__ import annotations

import pytest

from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory

pytestmark = BROWSER_MARKS

NAME = "スコッティ フラワーパック トイレットペーパー 12ロール ダブル"

# How many lines the first `n` characters of the element's text take.
LINES_OF_PREFIX = """([el, n]) => {
  const text = el.firstChild;
  const range = document.createRange();
  range.setStart(text, 0);
  range.setEnd(text, n);
  const rects = [...range.getClientRects()].filter(r => r.width > 0);
  return new Set(rects.map(r => Math.round(r.bottom / 4))).size;
}"""


@pytest.fixture
def catalogue(transactional_db):
    listing = ListingFactory(
        name=NAME,
        category="トイレットペーパー",
        price=608,
        units_per_pack=12,
        unit_label="roll",
    )
    ListingFactory(name="UCC ゴールドスペシャル コーヒー 1kg", category="コーヒー", price=1580)
    return listing


def test_category_chips_speak_the_pages_language(browser, live_server, catalogue):
    for locale, coffee, paper in (("en-US", "Coffee", "Toilet paper"), ("ja-JP", "コーヒー", None)):
        context = browser.new_context(viewport={"width": 360, "height": 740}, locale=locale)
        page = context.new_page()
        page.goto(f"{live_server.url}/")
        chips = page.locator("ul.chips a").all_inner_texts()
        assert coffee in chips
        if paper:
            assert paper in chips and "トイレットペーパー" not in chips
        context.close()


def test_every_title_names_the_service_the_same_way(browser, live_server, catalogue):
    for locale, brand, other in (("en-US", "Yasugoro", "安ごろ"), ("ja-JP", "安ごろ", "Yasugoro")):
        context = browser.new_context(locale=locale)
        page = context.new_page()
        for path in ("/", "/?q=scottie", f"/listings/{catalogue.pk}/", "/watches/",
                     "/notifications/", "/settings/", "/listings/999999/"):  # fmt: skip
            page.goto(f"{live_server.url}{path}")
            title = page.title()
            assert brand in title and other not in title, (path, title)
        context.close()


def test_the_unit_price_never_breaks_inside_a_word_at_1280(browser, live_server, catalogue):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="ja-JP")
    page = context.new_page()
    page.goto(f"{live_server.url}/listings/{catalogue.pk}/")
    unit = page.locator(".facts dd", has_text="1ロールあたり")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "listing-1280x800-ja.png"), full_page=True)
    assert unit.inner_text().replace("\n", "") == "1ロールあたり¥50.67"
    # It may wrap before the price, never inside the words ("1ロールあた" / "り¥50.67").
    per_roll = len("1ロールあたり")
    assert page.evaluate(LINES_OF_PREFIX, [unit.element_handle(), per_roll]) == 1
    context.close()


def test_search_finds_hiragana_and_english(browser, live_server, catalogue):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    page = context.new_page()
    for query in ("すこってぃ", "toilet paper", "ＳＣＯＴＴＩＥ", "toiretto"):
        page.goto(f"{live_server.url}/")
        page.get_by_role("searchbox").fill(query)
        page.get_by_role("searchbox").press("Enter")
        page.wait_for_url("**/?q=*")
        results = page.locator("section[aria-labelledby=all-h] .listing-row a.name")
        assert results.all_inner_texts() == [NAME], query
    context.close()
