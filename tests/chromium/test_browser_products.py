"""Products in a real browser (Debian's chromium, Playwright) against the live server and the
fake Yahoo! Shopping: add a product by typing its JAN code, see every shop's offer cheapest
first, watch it at a price. Screenshots of the product page on a phone (360×740) and a desktop
(1280×800), in English and Japanese, go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory, with_history
from watches.models import Listing, Product, Watch

pytestmark = BROWSER_MARKS

JAN = "4901750404406"
SHOPS = [("yasu-a", 620, 2), ("yasu-b", 520, 3), ("yasu-c", 550, 2), ("yasu-d", 505, 2)]


@pytest.fixture
def shops(yahoo, transactional_db):
    for store, price, shipping in SHOPS:
        yahoo.add(
            f"{store}_tp-12r",
            jan=JAN,
            price=price,
            shipping=shipping,
            name="スコッティ フラワーパック 12ロール ダブル",
            seller={"sellerId": store, "name": f"{store} ストア"},
        )
    return yahoo


def new_page(browser, width: int, height: int, locale: str):
    context = browser.new_context(viewport={"width": width, "height": height}, locale=locale)
    return context, context.new_page()


def test_add_a_product_by_jan_see_its_offers_and_watch_it(browser, live_server, shops):
    context, page = new_page(browser, 360, 740, "en-US")
    page.goto(f"{live_server.url}/")
    page.get_by_text("Compare every shop: add a product by its JAN code").click()
    # Chromium on Linux has no BarcodeDetector: no Scan button, typing is the way.
    assert page.evaluate("typeof window.BarcodeDetector") == "undefined"
    assert page.get_by_role("button", name="Scan the barcode").count() == 0
    page.get_by_label("JAN code (the barcode's digits)").fill("４９０１７５０ ４０４４０６")
    page.get_by_role("button", name="Find every shop").click()
    product = Product.objects.get(jan=JAN)
    page.wait_for_url(f"**/products/{product.pk}/")
    shops_in_order = page.locator("ol.offers .offer-shop").all_inner_texts()
    assert [text.split(" ")[0] for text in shops_in_order] == [
        "yasu-d",
        "yasu-b",
        "yasu-c",
        "yasu-a",
    ]
    # After points: ¥505 gives 5 pt (the fake answers 1 % back).
    assert "from ¥500 at 4 shops" in page.locator(".offers-from").inner_text()
    assert "shipping unknown" in page.locator("ol.offers").inner_text()

    page.get_by_label("Your price (yen)").fill("500")
    page.get_by_role("button", name="Watch every shop").click()
    page.wait_for_url(f"**/products/{product.pk}/#your-watches")
    assert page.get_by_role("heading", name="You are watching this").is_visible()
    watch = Watch.objects.get()
    assert (watch.product, watch.target_price) == (product, 500)
    context.close()


@pytest.mark.parametrize(
    ("locale", "words"),
    [("en-US", ("Search", "Find every shop")), ("ja-JP", ("検索", "ショップを探す"))],
)
def test_a_jan_code_typed_in_the_search_box_adds_then_opens_its_product(
    browser, live_server, shops, locale, words
):
    search, find = words
    context, page = new_page(browser, 360, 740, locale)
    page.goto(f"{live_server.url}/")
    page.locator("#q").fill(JAN)
    page.get_by_role("button", name=search, exact=True).click()
    page.wait_for_url("**/?q=*")
    # Not known yet: the JAN form is open, filled in, and the empty result points to it.
    jan_field = page.locator("#add-jan input[name=jan]")
    assert jan_field.is_visible() and jan_field.input_value() == JAN
    page.locator(".listings a[href='#add-jan']").click()
    page.locator("#add-jan").get_by_role("button", name=find).click()
    product = Product.objects.get(jan=JAN)
    page.wait_for_url(f"**/products/{product.pk}/")
    # Known now: the same code in the search box opens its page.
    page.goto(f"{live_server.url}/")
    page.locator("#q").fill(f"{JAN[:7]} {JAN[7:]}")
    page.locator("#q").press("Enter")
    page.wait_for_url(f"**/products/{product.pk}/")
    assert page.locator("ol.offers .offer").count() == 4
    context.close()


# A phone's browser, as far as the page can tell: a BarcodeDetector that reads the pack's code
# and a camera (a canvas stream).
FAKE_CAMERA = """
window.BarcodeDetector = class {
  constructor(options) { window.__formats = options.formats; }
  detect(source) { return Promise.resolve([{rawValue: "%s", format: "ean_13"}]); }
};
navigator.mediaDevices.getUserMedia = function () {
  const canvas = document.createElement("canvas");
  canvas.width = 32; canvas.height = 32;
  canvas.getContext("2d").fillRect(0, 0, 32, 32);
  return Promise.resolve(canvas.captureStream());
};
"""


def test_where_the_browser_reads_barcodes_scanning_adds_the_product(browser, live_server, shops):
    context, page = new_page(browser, 360, 740, "en-US")
    context.add_init_script(FAKE_CAMERA % JAN)
    page.goto(f"{live_server.url}/")
    page.get_by_text("Compare every shop: add a product by its JAN code").click()
    page.get_by_role("button", name="Scan the barcode").click()
    product_url = "**/products/*/"
    page.wait_for_url(product_url)
    assert page.evaluate("window.__formats") is None  # a new page: the detector's job is done
    assert Product.objects.get().jan == JAN
    assert page.locator("ol.offers .offer").count() == 4
    context.close()


def test_a_bad_jan_is_told_next_to_the_field_in_the_browser(browser, live_server, shops):
    context, page = new_page(browser, 360, 740, "en-US")
    page.goto(f"{live_server.url}/")
    page.get_by_text("Compare every shop: add a product by its JAN code").click()
    page.get_by_label("JAN code (the barcode's digits)").fill("4901750404408")
    page.get_by_role("button", name="Find every shop").click()
    page.wait_for_url("**/products/add")
    assert "last digit does not match" in page.locator("#add-jan").inner_text()
    assert not Product.objects.exists() and shops.requests == []
    context.close()


LONG_SHOP = "トイレットペーパーと日用品の専門店 やすごろ本店"


def one_line(box: dict, line_height: float) -> bool:
    return box["height"] < 1.6 * line_height


@pytest.mark.parametrize(("locale", "lang"), [("en-US", "en"), ("ja-JP", "ja")])
def test_each_offer_reads_whole_on_a_phone_and_a_desktop(browser, live_server, shops, locale, lang):
    """A card per shop: nothing wider than the screen, and each offer's shop name, price and
    time of the last check each on one line — never a time broken as "21:0 / 7" or a shop
    name a character per line."""
    from watches.products.intake import add_product

    product = add_product(JAN)
    Listing.objects.filter(item_code="yasu-c_tp-12r").update(shop_name=LONG_SHOP)
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in ((360, 740), (1280, 800)):
        context, page = new_page(browser, width, height, locale)
        page.goto(f"{live_server.url}/products/{product.pk}/")
        assert page.locator(f'html[lang="{lang}"]').count() == 1
        offers = page.locator("ol.offers .offer")
        assert offers.count() == 4
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{width}px: {overflow}px too wide"
        for index in range(4):
            card = offers.nth(index)
            card_box = card.bounding_box()
            assert card_box["x"] >= 0 and card_box["x"] + card_box["width"] <= width
            for part in (".offer-shop", ".offer-price .price", ".offer-checked"):
                element = card.locator(part)
                line = float(element.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
                box = element.bounding_box()
                assert one_line(box, line), (width, lang, part, element.inner_text(), box)
                assert box["x"] + box["width"] <= card_box["x"] + card_box["width"] + 1
        long_name = page.locator(".offer-shop a", has_text="トイレットペーパーと日用品")
        assert long_name.get_attribute("title") == LONG_SHOP, "the whole name, when cut"
        page.screenshot(path=str(ARTIFACTS / f"product-{lang}-{width}.png"), full_page=True)
        context.close()


# One product in five shops, as a shopper meets it on the home page and in a search: the first
# offer at ¥431 (down from ¥500), the cheapest at ¥401, one with its shipping unknown.
FIVE_SHOPS = [(431, 500, 0), (401, 450, 0), (520, 520, 0), (530, 530, None), (612, 612, 0)]
FROM_WORDS = {
    "en": {"from": "from ¥401 at 5 shops", "unit": "¥33.42 per roll"},
    "ja": {"from": "5店で ¥401 から", "unit": "1ロールあたり¥33.42"},
}


@pytest.fixture
def five_shops(transactional_db) -> Product:
    now = timezone.now()
    name = "スコッティ フラワーパック 12ロール ダブル"
    product = Product.objects.create(jan=JAN, name=name, units_per_pack=12, unit_label="roll")
    for price, usual, shipping in FIVE_SHOPS:
        listing = ListingFactory.create(
            name=name, category="トイレットペーパー", price=price, shipping=shipping
        )
        Listing.objects.filter(pk=listing.pk).update(product=product, jan=JAN)
        with_history(listing, [usual] * 40 + [price], now=now)
    return product


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("lang", ["ja", "en"])
def test_home_and_search_show_a_product_once_at_its_cheapest_offer(
    browser, live_server, five_shops, lang, width
):
    """Issue 40 §2 as a shopper sees it: "Cheap right now", "All listings" and a search each
    show the product in one row, whose big number is the cheapest offer (¥401, not the first
    shop's ¥431), beside "from ¥401 at 5 shops" and that offer's price per roll."""
    words = FROM_WORDS[lang]
    context, page = new_page(browser, width, 800, {"ja": "ja-JP", "en": "en-US"}[lang])
    product_link = f"a.name[href='/products/{five_shops.pk}/']"
    for path, sections in (
        ("/", ("cheap-h", "all-h")),
        ("/?q=スコッティ", ("all-h",)),
        ("/?q=scottie", ("all-h",)),
    ):
        page.goto(f"{live_server.url}{path}")
        assert page.locator(f'html[lang="{lang}"]').count() == 1
        for heading in sections:
            section = page.locator(f"section[aria-labelledby={heading}]")
            rows = section.locator(".listing-row")
            assert rows.count() == 1, (path, heading, rows.all_inner_texts())
            row = rows.first
            assert row.locator(product_link).is_visible(), (path, heading)
            assert row.locator(".prices .price").all_inner_texts() == ["¥401"], (path, heading)
            meta = row.locator(".what .meta").inner_text()
            assert words["from"] in meta, (path, heading, meta)
            assert words["unit"] in row.locator(".prices").inner_text().replace("\n", "")
            assert "¥431" not in row.inner_text()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} at {width}px: {overflow}px too wide"
    page.screenshot(path=str(ARTIFACTS / f"from-price-{lang}-{width}.png"), full_page=True)
    context.close()
