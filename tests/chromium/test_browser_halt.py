"""A marketplace halted for a configuration fault, in a real browser (Chromium, Japanese and
English): the admin overview opens with a banner naming the setting to fix and the rows held,
and the person's /notifications/ says in words why the notification waits — then that it
went out, once Rakuten answers again."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from outbox.models import Outbox, Reason, Status
from tests.browser import ARTIFACTS, BROWSER_MARKS, STAFF_PASSWORD, log_in
from tests.factories import ListingFactory
from tests.outbox_helpers import enqueue_for
from watches.models import Channel, Device, MarketplaceHalt, Watch

pytestmark = BROWSER_MARKS

CODE = "yasu-shop:tp-12r"
NAME = "スコッティ フラワーパック トイレットペーパー 12ロール ダブル"


@pytest.fixture
def rakuten_listing(transactional_db, ichiba):
    ichiba.add(CODE, price=520)
    return ListingFactory(source="rakuten", item_code=CODE, name=NAME, price=520)


def watch_at(page, live_server, listing, target: str) -> None:
    page.goto(f"{live_server.url}/listings/{listing.pk}/")
    page.get_by_label("Tell me when", exact=True).select_option("target_price")
    page.get_by_label("Your price (yen)").fill(target)
    page.get_by_role("button", name="Watch", exact=True).click()
    page.wait_for_url(f"**/listings/{listing.pk}/#your-watches")


def test_a_held_notification_says_why_then_goes_out_once_rakuten_answers(
    browser, live_server, rakuten_listing, ichiba, settings
):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    page = context.new_page()
    watch_at(page, live_server, rakuten_listing, "600")
    Device.objects.update(channel=Channel.CONSOLE)  # reachable: the dispatcher re-checks
    row = enqueue_for(Watch.objects.get(), price=520, line="600")
    settings.RAKUTEN_API_VERSION = "20220601"  # retired: Rakuten refuses every request
    call_command("dispatch_outbox")
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)

    page.goto(f"{live_server.url}/notifications/")
    entry = page.locator("li.entry.on_the_way").inner_text()
    assert NAME in entry
    assert "The shop's site is refusing our price checks until we fix a setting" in entry
    assert "RAKUTEN" not in page.locator("main").inner_text()
    cookies = context.cookies()
    context.close()

    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="ja-JP")
    context.add_cookies(cookies)
    ja = context.new_page()
    ja.goto(f"{live_server.url}/notifications/")
    text = ja.locator("li.entry.on_the_way").inner_text()
    assert "ショップのサイトが価格の確認に応じていません" in text
    ARTIFACTS.mkdir(exist_ok=True)
    ja.screenshot(path=str(ARTIFACTS / "notifications-held-360x740-ja.png"), full_page=True)

    # The operator sets a version Rakuten knows; the next probe is answered.
    ichiba.versions.add("20220601")
    now = timezone.now()
    MarketplaceHalt.objects.update(probe_after=now)  # the probe time, come
    Outbox.objects.filter(pk=row.pk).update(next_attempt_at=now)
    call_command("dispatch_outbox")
    assert Outbox.objects.get(pk=row.pk).status == Status.SENT
    ja.goto(f"{live_server.url}/notifications/")
    assert ja.locator("li.entry.sent").count() == 1
    assert ja.locator("li.entry.on_the_way").count() == 0
    context.close()


@pytest.mark.parametrize(
    ("lang", "title", "fix"),
    [
        (
            "en",
            "Rakuten Ichiba is halted: it will not answer until a person fixes its configuration.",
            "Set: RAKUTEN_API_VERSION",
        ),
        (
            "ja",
            "楽天市場への問い合わせを停止しています。担当者が設定を直すまで応答しません。",
            "設定する変数： RAKUTEN_API_VERSION",
        ),
    ],
)
@pytest.mark.parametrize("size", [(360, 740), (1280, 800)])
def test_the_admin_banner_names_the_setting_to_fix(
    browser, live_server, rakuten_listing, settings, lang, title, fix, size
):
    from playwright.sync_api import expect

    from watches.polling.observations import fetch

    User.objects.create_superuser("ops", "ops@example.test", STAFF_PASSWORD)
    settings.RAKUTEN_API_VERSION = "20220601"
    fetch("rakuten", [CODE])
    page = log_in(browser, live_server, lang=lang, size=size)
    for url in ("/admin/outbox/outbox/overview/", "/admin/outbox/outbox/"):
        page.goto(f"{live_server.url}{url}")
        banner = page.locator(".ob-halts")
        expect(banner).to_be_visible()
        expect(banner.locator(".ob-halt-title")).to_have_text(title)
        expect(banner.locator(".ob-halt-fix")).to_have_text(fix)
        expect(banner.locator(".ob-halt-detail")).to_contain_text("API Configuration not found")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= size[0], f"{url} is {width} px wide at {size[0]}"
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{live_server.url}/admin/outbox/outbox/overview/")
    page.screenshot(path=str(ARTIFACTS / f"admin-halt-{lang}-{size[0]}.png"), full_page=True)
    banner = page.locator(".ob-halts")
    banner.get_by_role("link").click()
    page.wait_for_url("**/admin/outbox/outbox/?*reason__exact=marketplace_halted*")
