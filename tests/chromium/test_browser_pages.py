"""The pages in a real browser: Debian's chromium driven by Playwright against the live server.

Find a listing by its Japanese name, see its SVG chart, watch it at a target price, find the
watch under My watches, remove it — and see the notification that was on its way end
`dropped watch_removed` at the next dispatch, said in words on the history page. Screenshots of
the listing page (phone and desktop) go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from outbox.enqueue import enqueue
from outbox.models import Outbox, Reason, Status
from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory
from watches.models import PricePoint, Watch
from watches.polling.history import refresh_stats

NAME = "スコッティ フラワーパック トイレットペーパー 12ロール ダブル"

pytestmark = BROWSER_MARKS


def new_page(browser, width: int, height: int, locale: str = "en-US"):
    context = browser.new_context(viewport={"width": width, "height": height}, locale=locale)
    return context, context.new_page()


@pytest.fixture
def seeded(transactional_db):
    """A toilet-paper listing with 90 days of history (two stock-outs), and a neighbour."""
    now = timezone.now()
    listing = ListingFactory(
        name=NAME,
        shop_name="安ごろデモショップ",
        category="トイレットペーパー",
        price=598,
        units_per_pack=12,
        unit_label="roll",
    )
    ListingFactory(name="UCC ゴールドスペシャル コーヒー 1kg", category="コーヒー", price=1580)
    prices = [640 - (day % 9) * 12 - (30 if 50 < day < 60 else 0) for day in range(90)]
    PricePoint.objects.bulk_create(
        PricePoint(
            listing=listing,
            observed_at=now - dt.timedelta(days=90 - day, hours=3),
            price=price,
            shipping=0,
            in_stock=not (20 <= day < 23 or 70 <= day < 72),
        )
        for day, price in enumerate(prices)
    )
    refresh_stats([listing.pk], now)
    listing.refresh_from_db()
    return listing


def test_search_finds_a_listing_by_its_japanese_name(browser, live_server, seeded):
    context, page = new_page(browser, 360, 740)
    page.goto(f"{live_server.url}/")
    page.get_by_role("searchbox").fill("トイレット")
    page.get_by_role("searchbox").press("Enter")
    page.wait_for_url("**/?q=*")
    results = page.locator("section[aria-labelledby=all-h] .listing-row a.name")
    assert results.all_inner_texts() == [NAME]
    results.first.click()
    page.wait_for_url(f"**/listings/{seeded.pk}/")
    assert page.get_by_role("heading", level=1).inner_text() == NAME
    context.close()


def test_the_listing_page_shows_the_svg_chart_on_a_phone_and_a_desktop(
    browser, live_server, seeded
):
    ARTIFACTS.mkdir(exist_ok=True)
    for width, height in ((360, 740), (1280, 800)):
        context, page = new_page(browser, width, height)
        page.goto(f"{live_server.url}/listings/{seeded.pk}/")
        chart = page.locator("figure.chart svg[role=img]")
        assert chart.is_visible()
        box = chart.bounding_box()
        assert box["width"] <= width - 20, "the chart fits the screen"
        assert page.locator("figure.chart path.price-line").get_attribute("d").startswith("M")
        assert page.locator("figure.chart rect.stockout").count() == 2
        assert (
            page.locator("figure.chart svg > title").text_content() == "Price over the last 90 days"
        )
        # Nothing wider than the screen: no sideways scrolling on a phone.
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(ARTIFACTS / f"listing-{width}x{height}.png"), full_page=True)
        context.close()
    # And in Japanese, as most people will see it.
    context, page = new_page(browser, 360, 740, locale="ja-JP")
    page.goto(f"{live_server.url}/listings/{seeded.pk}/")
    assert page.locator("figure.chart svg > title").text_content() == "過去90日間の価格"
    page.screenshot(path=str(ARTIFACTS / "listing-360x740-ja.png"), full_page=True)
    context.close()


def test_watch_then_remove_and_the_pending_notification_is_withheld_in_words(
    browser, live_server, seeded
):
    context, page = new_page(browser, 360, 740)
    page.goto(f"{live_server.url}/listings/{seeded.pk}/")

    # The target field is the one shown for "At or below my price"; the drop % is hidden.
    page.get_by_label("Tell me when", exact=True).select_option("target_price")
    assert page.locator("input[name=drop_percent]").is_hidden()
    page.get_by_label("Your price (yen)").fill("500")
    hint = page.locator("[data-low-hint]")
    # The form counts the points by default: the low it compares with is after points.
    assert hint.is_visible()
    assert "below the lowest price after points of the last 90 days" in hint.inner_text()
    page.get_by_label("Your price (yen)").fill("600")
    assert hint.is_hidden()
    page.get_by_role("button", name="Watch", exact=True).click()
    page.wait_for_url(f"**/listings/{seeded.pk}/#your-watches")
    assert "At or below ¥600" in page.locator("#your-watches").inner_text()
    assert page.locator("figure.chart line.mark-target").count() == 1

    # Under My watches.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My watches").click()
    page.wait_for_url("**/watches/")
    row = page.locator("li.watch-row")
    assert row.count() == 1
    assert NAME in row.inner_text() and "At or below ¥600" in row.inner_text()
    assert page.locator("[data-push-toggle]").is_visible(), "push status and button, always"
    page.screenshot(path=str(ARTIFACTS / "my-watches-360x740.png"), full_page=True)

    # A notification is on its way for it when it is removed.
    watch = Watch.objects.get()
    assert enqueue(watch, timezone.now(), {"price": 590, "line": "600"})
    row.get_by_role("button", name="Remove").click()
    page.wait_for_url("**/watches/?removed=*")
    assert page.locator("li.watch-row").count() == 0
    assert "Removed your watch on" in page.locator(".undo").inner_text()

    call_command("dispatch_outbox")
    outbox = Outbox.objects.get()
    assert (outbox.status, outbox.reason) == (Status.DROPPED, Reason.WATCH_REMOVED)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Notifications").click()
    page.wait_for_url("**/notifications/")
    entry = page.locator("li.entry").first
    assert "Not sent" in entry.inner_text()
    assert "You removed this watch." in entry.inner_text()
    assert NAME in entry.inner_text()
    page.screenshot(path=str(ARTIFACTS / "notifications-360x740.png"), full_page=True)
    context.close()


def test_the_watch_form_works_without_javascript(browser, live_server, seeded):
    context = browser.new_context(viewport={"width": 360, "height": 740}, java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{live_server.url}/listings/{seeded.pk}/")
    # Every parameter is on the page, each saying which choice it belongs to.
    assert page.locator("input[name=drop_percent]").is_visible()
    assert page.get_by_text("Only for “Drops by a percentage”.").is_visible()
    page.locator("select[name=trigger]").select_option("price_drop")
    page.locator("input[name=drop_percent]").fill("95")
    page.locator("form[data-watch-form] button[type=submit]").click()
    assert "The drop must be from 1 to 90 %." in page.locator("#id_drop_percent_error").inner_text()
    page.locator("input[name=drop_percent]").fill("20")
    page.locator("form[data-watch-form] button[type=submit]").click()
    page.wait_for_url(f"**/listings/{seeded.pk}/#your-watches")
    assert Watch.objects.get().drop_percent == 20
    context.close()
