"""The price after points in a real browser (Debian's chromium, Playwright), in Japanese and
English, on a phone (360 px) and a desktop (1280 px): the breakdown — price, shipping,
points, the price after points — reads whole on the listing page, the product page, My
watches and /notifications/ (a row held back because the points campaign ended); the listing
says its unit price after points, and the product page lists first, as the cheapest, the
offer that is cheapest after points (¥520 − 60 pt = ¥460), not by price (¥505). Nothing is
wider than the screen, and no term of the sum is split across lines. Screenshots go to
test-artifacts/ (git-ignored)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason
from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory, WatchFactory, device_with_cookie
from watches.devices import cookie_name
from watches.models import Channel
from watches.polling.poll import poll
from watches.products.intake import add_product

pytestmark = BROWSER_MARKS

JST = zoneinfo.ZoneInfo("Asia/Tokyo")
CODE = "yasu-shop:tp-12r"
JAN = "4901750404406"
# Every term of a breakdown on one line, inside the box that holds the breakdown.
TERMS_WHOLE = """() => Array.from(document.querySelectorAll(".breakdown .term")).every((term) => {
  const box = term.closest(".breakdown").parentElement.getBoundingClientRect();
  const rect = term.getBoundingClientRect();
  return term.getClientRects().length === 1 && rect.right <= box.right + 1;
})"""
WORDS = {
    "en": {
        "sum": "= ¥1,890",
        "campaign": "(5×, until",
        "ended": "points campaign ended",
        "unit": "Unit price after points ¥157.50 per roll",
        "best sum": "= ¥460",
        "from": "from ¥460 at 3 shops",
        "cheapest": "Cheapest",
    },
    "ja": {
        "sum": "＝ 実質¥1,890",
        "campaign": "（5倍・",
        "ended": "ポイントキャンペーンが終わり",
        "unit": "ポイント還元後の単価 1ロールあたり¥157.50",
        "best sum": "＝ 実質¥460",
        "from": "3店で ¥460 から",
        "cheapest": "最安",
    },
}


def window(start: dt.timedelta, end: dt.timedelta) -> tuple[str, str]:
    """A campaign's window from `start` to `end` from now, as the shop writes it."""
    now = timezone.now().astimezone(JST)
    return f"{now + start:%Y-%m-%d %H:%M}", f"{now + end:%Y-%m-%d %H:%M}"


@pytest.fixture
def world(ichiba, yahoo, transactional_db):
    """A listing polled in its 5× campaign (¥1,980 − 90 pt = ¥1,890), watched after points
    at ¥1,900 by a device whose detection was then held back: the campaign ended before the
    re-check. A product whose cheapest offer after points is not its cheapest price. Returns
    (the device's token, the pages to look at)."""
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 5, *window(-dt.timedelta(days=1), dt.timedelta(days=2)))
    listing = ListingFactory(source="rakuten", item_code=CODE, price=1980)
    device, token = device_with_cookie(channel=Channel.CONSOLE)
    WatchFactory(device=device, listing=listing, target_price=1900, after_points=True)
    # A second watch, detected too, whose campaign ends before its re-check.
    other = ListingFactory(source="rakuten", item_code="yasu-shop:dt-2k", price=1980)
    ichiba.add(other.item_code, price=1980)
    ichiba.campaign(other.item_code, 5, *window(-dt.timedelta(days=1), dt.timedelta(days=2)))
    WatchFactory(device=device, listing=other, target_price=1900, after_points=True)
    # Detected minutes ago: the dispatcher asks the shop again rather than reuse the poll's.
    with time_machine.travel(timezone.now() - dt.timedelta(minutes=5)):
        assert poll(codes=[CODE, other.item_code], force=True).enqueued == 2
    ichiba.campaign(other.item_code, 5, *window(-dt.timedelta(days=1), -dt.timedelta(minutes=2)))
    run_cycle()
    assert Outbox.objects.filter(reason=Reason.POINTS_ENDED).count() == 1

    for number, (price, points) in enumerate(((505, 5), (520, 60), (620, 6)), start=1):
        code = f"store{number}_tp-12r"
        yahoo.add(code, jan=JAN, price=price, name="スコッティ フラワーパック 12ロール ダブル")
        yahoo.points(code, amount=0, lyLimitedBonusAmount=points)
    product = add_product(JAN)
    pages = {
        "listing": f"/listings/{listing.pk}/",
        "product": f"/products/{product.pk}/",
        "watches": "/watches/",
        "notifications": "/notifications/",
    }
    return token, pages


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("lang", ["ja", "en"])
def test_the_breakdown_reads_whole_on_every_page(browser, live_server, world, lang, width):
    token, pages = world
    words = WORDS[lang]
    context = browser.new_context(
        viewport={"width": width, "height": 900}, locale={"ja": "ja-JP", "en": "en-US"}[lang]
    )
    host = live_server.url.split("//", 1)[1].split(":")[0]
    context.add_cookies([{"name": cookie_name(), "value": token, "domain": host, "path": "/"}])
    page = context.new_page()
    ARTIFACTS.mkdir(exist_ok=True)
    for kind, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        assert page.locator(f'html[lang="{lang}"]').count() == 1
        breakdowns = page.locator(".breakdown")
        assert breakdowns.count() >= 1, kind
        assert breakdowns.first.is_visible(), kind
        text = " ".join(breakdowns.all_inner_texts())
        if kind == "product":
            # ¥520 − 60 pt = ¥460 beats ¥505 − 5 pt = ¥500: listed first, as the cheapest.
            best = page.locator(".best-offer").inner_text()
            assert "¥520" in best and "60" in best and words["best sum"] in best, best
            assert words["from"] in page.locator(".offers-from").inner_text()
            offers = page.locator("ol.offers .offer")
            prices = offers.locator(".offer-price .price").all_inner_texts()
            assert prices == ["¥460", "¥500", "¥614"], prices
            first = offers.first
            assert "best" in (first.get_attribute("class") or "").split()
            assert first.locator(".status.best").inner_text() == words["cheapest"]
            assert offers.locator(".status.best").count() == 1
            first_sum = first.locator(".breakdown").inner_text()
            assert "¥520" in first_sum and words["best sum"] in first_sum, first_sum
        else:
            assert words["sum"] in text and words["campaign"] in text, (kind, text)
        if kind == "listing":
            facts = " ".join(page.locator(".facts").inner_text().split())
            assert words["unit"] in facts, facts
        if kind == "notifications":
            assert words["ended"] in page.locator("ul.history").inner_text()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{kind} at {width}px: {overflow}px too wide"
        assert page.evaluate(TERMS_WHOLE), f"{kind} at {width}px: a term split or too wide"
        page.screenshot(path=str(ARTIFACTS / f"points-{kind}-{lang}-{width}.png"), full_page=True)
    context.close()
