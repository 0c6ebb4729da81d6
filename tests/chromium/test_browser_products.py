"""Products in a real browser (Debian's chromium, Playwright) against the live server and the
fake Yahoo! Shopping: add a product by typing its JAN code, see every shop's offer cheapest
first, watch it at a price. Screenshots of the product page on a phone (360×740) and a desktop
(1280×800), in English and Japanese, go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

import pytest

from tests.browser import ARTIFACTS, BROWSER_MARKS
from watches.models import Product, Watch

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
    shops_in_order = page.locator("table.offers tbody th").all_inner_texts()
    assert [text.split(" ")[0] for text in shops_in_order] == [
        "yasu-d",
        "yasu-b",
        "yasu-c",
        "yasu-a",
    ]
    # After points: ¥505 gives 5 pt (the fake answers 1 % back).
    assert "from ¥500 at 4 shops" in page.locator("h1 + p").inner_text()
    assert "unknown (not included)" in page.locator("table.offers").inner_text()

    page.get_by_label("Your price (yen)").fill("500")
    page.get_by_role("button", name="Watch every shop").click()
    page.wait_for_url(f"**/products/{product.pk}/#your-watches")
    assert page.get_by_role("heading", name="You are watching this").is_visible()
    watch = Watch.objects.get()
    assert (watch.product, watch.target_price) == (product, 500)
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
    assert page.locator("table.offers tbody tr").count() == 4
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


@pytest.mark.parametrize(("locale", "lang"), [("en-US", "en"), ("ja-JP", "ja")])
def test_the_product_page_on_a_phone_and_a_desktop(browser, live_server, shops, locale, lang):
    from watches.products.intake import add_product

    product = add_product(JAN)
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in ((360, 740), (1280, 800)):
        context, page = new_page(browser, width, height, locale)
        page.goto(f"{live_server.url}/products/{product.pk}/")
        assert page.locator(f'html[lang="{lang}"]').count() == 1
        assert page.locator("table.offers tbody tr").count() == 4
        # Nothing wider than the screen: the offers table scrolls inside its own box.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{width}px: {overflow}px too wide"
        page.screenshot(path=str(ARTIFACTS / f"product-{lang}-{width}.png"), full_page=True)
        context.close()
