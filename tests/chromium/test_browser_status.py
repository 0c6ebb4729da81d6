"""Truthful status in a real browser (Chromium, Japanese and English): with notifications
off the listing page and My watches say so, and a price that triggers leaves "we would have
told you" on /notifications/; a held-back entry shows both prices; a browser that refuses
push shows the page's own words, never its raw error."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from demo.market import set_product
from outbox.models import Outbox, Reason, Status
from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory
from tests.outbox_helpers import enqueue_for
from watches.models import Channel, Device, Watch
from watches.polling.poll import poll

pytestmark = BROWSER_MARKS

NAME = "スコッティ フラワーパック トイレットペーパー 12ロール ダブル"

# Chromium with permission for notifications whose push registration is refused: the case
# that used to print "Registration failed - permission denied" inside a Japanese page.
REFUSING_PUSH = """
if (window.Notification) {
  Notification.requestPermission = function () { return Promise.resolve("granted"); };
}
if (window.PushManager) {
  PushManager.prototype.subscribe = function () {
    return Promise.reject(new DOMException("Registration failed - permission denied",
                                           "NotAllowedError"));
  };
  PushManager.prototype.getSubscription = function () { return Promise.resolve(null); };
}
"""


@pytest.fixture
def listing(transactional_db):
    return ListingFactory(name=NAME, category="トイレットペーパー", price=700, last_polled_at=None)


def watch_at(page, live_server, listing, target: str) -> None:
    page.goto(f"{live_server.url}/listings/{listing.pk}/")
    page.get_by_label("Tell me when", exact=True).select_option("target_price")
    page.get_by_label("Your price (yen)").fill(target)
    page.get_by_role("button", name="Watch", exact=True).click()
    page.wait_for_url(f"**/listings/{listing.pk}/#your-watches")


def test_notifications_off_is_said_everywhere_and_leaves_a_trace(browser, live_server, listing):
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    page = context.new_page()
    watch_at(page, live_server, listing, "600")
    assert Device.objects.get().can_receive is False

    # The price falls under the line; polling judges the watch though nobody can be told.
    set_product(listing.item_code, price=520)
    poll()
    assert Outbox.objects.count() == 0

    page.goto(f"{live_server.url}/listings/{listing.pk}/")
    yours = page.locator("#your-watches").inner_text()
    assert "expect a notification" not in yours
    # The watch counts the points (the form's default): ¥520 − 4 pt, the demo shop's 1 %.
    assert "It is already ¥516, at or below your price, but nothing can reach you yet" in yours
    assert "Push notifications are off for this browser." in yours

    page.goto(f"{live_server.url}/watches/")
    verdict = page.locator("li.watch-row .verdict").inner_text()
    assert "nothing can reach you yet: we cannot tell you" in verdict
    assert "after the next check" not in page.locator("main").inner_text()

    page.goto(f"{live_server.url}/notifications/")
    missed = page.locator("li.entry.missed")
    assert missed.count() == 1
    text = missed.inner_text()
    assert NAME in text and "We would have told you: ¥516 on" in text
    assert "Neither push nor e-mail can reach you now." in text
    missed.get_by_role("link", name="Turn push notifications on").click()
    page.wait_for_url("**/watches/")
    assert page.locator("[data-push-toggle]").is_visible()
    cookies = context.cookies()
    context.close()

    # The same in Japanese.
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="ja-JP")
    context.add_cookies(cookies)
    ja = context.new_page()
    ja.goto(f"{live_server.url}/notifications/")
    text = ja.locator("li.entry.missed").inner_text()
    assert "お知らせするはずでした" in text and "¥516" in text
    ARTIFACTS.mkdir(exist_ok=True)
    ja.screenshot(path=str(ARTIFACTS / "notifications-missed-360x740-ja.png"), full_page=True)
    context.close()


def test_a_held_back_entry_shows_both_prices(browser, live_server, listing):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    page = context.new_page()
    watch_at(page, live_server, listing, "600")
    # Reachable (console channel), so the dispatcher really re-checks the price.
    Device.objects.update(channel=Channel.CONSOLE)
    enqueue_for(Watch.objects.get(), price=520, line="600")
    set_product(listing.item_code, price=640)
    call_command("dispatch_outbox")
    assert Outbox.objects.get().status == Status.DROPPED
    assert Outbox.objects.get().reason == Reason.CONDITION_LOST

    page.goto(f"{live_server.url}/notifications/")
    entry = page.locator("li.entry.withheld")
    assert "The price went back up before we could tell you." in entry.inner_text()
    assert "Seen at ¥520; ¥640 when we checked again." in entry.inner_text()
    context.close()


def test_a_browser_refusing_push_shows_our_words_in_japanese(browser, live_server):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="ja-JP")
    page = context.new_page()
    page.add_init_script(REFUSING_PUSH)
    page.goto(f"{live_server.url}/settings/")
    page.wait_for_function("() => document.getElementById('push-settings').dataset.browserActive")
    page.locator("[data-push-toggle]").click()
    status = page.locator("[data-push-status]")
    page.wait_for_function(
        "() => document.querySelector('[data-push-status]').textContent.includes('プライベート')"
    )
    text = status.inner_text()
    assert "Registration failed" not in text and "permission denied" not in text
    # Permission was granted, so it is not "blocked": the reasons it may be refused.
    assert text == page.locator("#push-settings").get_attribute("data-msg-error")
    assert page.get_by_role("link", name="代わりにメールで受け取る →").is_visible()
    assert Device.objects.count() == 0
    context.close()


def test_a_push_service_error_is_told_in_the_pages_language(browser, live_server):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="ja-JP")
    page = context.new_page()
    page.add_init_script(
        REFUSING_PUSH.replace('"NotAllowedError"', '"AbortError"').replace(
            "permission denied", "push service error"
        )
    )
    page.goto(f"{live_server.url}/settings/")
    page.wait_for_function("() => document.getElementById('push-settings').dataset.browserActive")
    page.locator("[data-push-toggle]").click()
    expected = page.locator("#push-settings").get_attribute("data-msg-error")
    page.wait_for_function(
        "m => document.querySelector('[data-push-status]').textContent === m", arg=expected
    )
    assert "push service error" not in page.locator("[data-push-status]").inner_text()
    context.close()
