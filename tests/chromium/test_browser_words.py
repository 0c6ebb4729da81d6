"""Words that are true, as a person reads them in Chromium in the page's language, on a phone
(360 px) and for some on a desktop (1280 px) too: which channel reaches them (never "nothing
can reach you" above a mail that reached them), a notification held by quiet hours says until
when, a watch saved while its condition already holds says so and what follows, an offer's
page shows a product watch as the product's, a refused push says why and offers e-mail, and
each language is named in itself."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine
from django.utils import timezone

from outbox.models import Status
from tests.browser import BROWSER_MARKS
from tests.factories import ListingFactory, OutboxFactory
from watches.models import Channel, Device, Listing, NotifyVia, Product, Watch

pytestmark = BROWSER_MARKS

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
NAME = "スコッティ フラワーパック 12ロール"
JAN = "4901750404406"
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


def phone(browser, locale: str = "en-US", width: int = 360):
    context = browser.new_context(viewport={"width": width, "height": 740}, locale=locale)
    return context, context.new_page()


LOCALES = {"ja": "ja-JP", "en": "en-US"}
# What each language says, for the tests run in both at both widths.
WORDS = {
    "en": {
        "label": "Your price (yen)",
        "held": "Your quiet hours hold notifications until 08:00",
        "next check": "after the next check",
        "product watch": "You watch this product at every shop",
        "any shop": "Any shop at or below ¥370",
        "watching this": "You are watching this",
        "offers link": "Every shop's offer",
    },
    "ja": {
        "label": "希望価格（円）",
        "held": "おやすみ時間のため、お知らせは08:00まで保留します",
        "next check": "次の確認のあとにお知らせします",
        "product watch": "この商品を全ショップでウォッチ中",
        "any shop": "どこかのショップで¥370以下になったら",
        "watching this": "ウォッチ中",
        "offers link": "各ショップの価格",
    },
}


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0


def watch_at(page, live_server, listing, target: str, *, label: str = "Your price (yen)") -> str:
    """Watch `listing` at `target` through its page's form; the message the page then shows."""
    page.goto(f"{live_server.url}/listings/{listing.pk}/")
    page.get_by_label(label).fill(target)
    page.locator("#watch button[type=submit]").click()
    page.wait_for_url(f"**/listings/{listing.pk}/#your-watches")
    return page.locator("ul.messages").inner_text()


def test_push_off_but_email_confirmed_says_email_reaches_and_by_which_channel_each_went(
    browser, live_server
):
    listing = ListingFactory(name=NAME, price=700)
    for locale, reach, push_off, via in (
        ("en-US", "We tell you by e-mail at", "Push notifications are off", "by e-mail"),
        ("ja-JP", "へのメールでお知らせします", "プッシュ通知はオフ", "メールで"),
    ):
        context, page = phone(browser, locale)
        label = "Your price (yen)" if locale == "en-US" else "希望価格（円）"
        watch_at(page, live_server, listing, "600", label=label)
        device = Device.objects.order_by("-id").first()
        Device.objects.filter(pk=device.pk).update(
            email="me@mail.example", email_confirmed_at=timezone.now(), notify_via=NotifyVia.BOTH
        )
        watch = Watch.objects.get(device=device)
        OutboxFactory(
            watch=watch,
            device=device,
            channel=Channel.EMAIL,
            status=Status.SENT,
            sent_at=timezone.now(),
            sent_message={"title": NAME, "body": "¥580", "price": 580},
        )

        page.goto(f"{live_server.url}/notifications/")
        main = page.locator("main").inner_text()
        assert reach in main and "me@mail.example" in main and push_off in main, main
        assert "Nothing can reach you" not in main and "お知らせを届けられません" not in main
        assert page.locator("li.entry.sent .via").inner_text() == via

        # Settings after a form is sent: the same truth, never "notifications are off".
        page.goto(f"{live_server.url}/settings/")
        page.locator("section[aria-labelledby=quiet-h] button[type=submit]").click()
        page.wait_for_url("**/settings/#quiet-h")
        panel = page.locator("#push-settings").inner_text()
        assert push_off in panel and "me@mail.example" in panel, panel
        assert page.locator('[data-reach="none"]').is_hidden()
        context.close()


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("lang", ["ja", "en"])
def test_my_watches_says_a_met_watch_is_held_until_quiet_hours_end(
    browser, live_server, lang, width
):
    words = WORDS[lang]
    listing = ListingFactory(name=NAME, price=520, last_polled_at=None)
    context, page = phone(browser, LOCALES[lang], width)
    with time_machine.travel(dt.datetime(2026, 12, 1, 23, 10, tzinfo=TOKYO), tick=False):
        watch_at(page, live_server, listing, "600", label=words["label"])
        Device.objects.update(
            channel=Channel.CONSOLE, quiet_start=dt.time(22, 0), quiet_end=dt.time(8, 0)
        )
        page.goto(f"{live_server.url}/watches/")
        assert page.locator(f'html[lang="{lang}"]').count() == 1
        verdict = page.locator("p.verdict")
        assert verdict.is_visible()
        assert words["held"] in verdict.inner_text(), verdict.inner_text()
        assert words["next check"] not in page.locator("main").inner_text()
        assert fits(page), f"/watches/ wider than {width}px"
    context.close()


@pytest.mark.parametrize(
    ("locale", "label", "nothing", "holds"),
    [
        (
            "en-US",
            "Your price (yen)",
            "The price is already ¥1,007, at or below ¥1,280, but nothing can reach you yet",
            "The price is already ¥1,007, at or below ¥1,280: we tell you after its next price "
            "check, usually within 15 minutes.",
        ),
        (
            "ja-JP",
            "希望価格（円）",
            "すでに¥1,007で、¥1,280以下の条件を満たしていますが、まだお知らせを届ける手段がありません",
            "すでに¥1,007で、¥1,280以下の条件を満たしています。次の価格確認（ふつうは15分以内）",
        ),
    ],
)
def test_a_watch_saved_when_the_price_already_meets_it_says_so_and_what_follows(
    browser, live_server, settings, locale, label, nothing, holds
):
    settings.POLL_MINUTES = 15
    listing = ListingFactory(name=NAME, price=1007, shipping=0, units_per_pack=None)
    context, page = phone(browser, locale)
    # A new browser: nothing reaches it yet, and the message says so.
    assert nothing in watch_at(page, live_server, listing, "1280", label=label)
    # Reachable now (the console channel stands in for a push subscription).
    Device.objects.update(channel=Channel.CONSOLE)
    message = watch_at(page, live_server, listing, "1280", label=label)
    assert holds in message, message
    context.close()


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("lang", ["ja", "en"])
def test_an_offers_page_shows_a_product_watch_as_the_products_at_any_shop(
    browser, live_server, lang, width
):
    words = WORDS[lang]
    product = Product.objects.create(jan=JAN, name=NAME)
    cheap = ListingFactory(name=NAME, price=380, shipping=0, jan=JAN)
    other = ListingFactory(name=NAME, price=420, shipping=0, jan=JAN)
    # (`product=` is the factory's hook for the demo market's side: join them here.)
    Listing.objects.filter(pk__in=[cheap.pk, other.pk]).update(product=product)
    context, page = phone(browser, LOCALES[lang], width)
    page.goto(f"{live_server.url}/products/{product.pk}/")
    page.get_by_label(words["label"]).fill("370")
    page.locator("#watch button[type=submit]").click()
    page.wait_for_url(f"**/products/{product.pk}/#your-watches")
    assert Watch.objects.get().listing == cheap

    page.goto(f"{live_server.url}/listings/{cheap.pk}/")
    assert page.locator(f'html[lang="{lang}"]').count() == 1
    side = page.locator(".listing-side").inner_text()
    assert words["product watch"] in side, side
    assert words["any shop"] in side, side
    # Not the heading a watch on this offer alone has.
    listing_side = page.locator(".listing-side")
    assert listing_side.get_by_role("heading", name=words["watching this"], exact=True).count() == 0
    assert page.locator("#product-watches").is_visible()
    assert fits(page), f"the listing page wider than {width}px"
    page.locator("#product-watches").get_by_role("link", name=words["offers link"]).click()
    page.wait_for_url(f"**/products/{product.pk}/")
    context.close()


def test_a_browser_refusing_push_says_why_and_offers_email(browser, live_server):
    context, page = phone(browser)
    page.add_init_script(REFUSING_PUSH)
    page.goto(f"{live_server.url}/watches/")
    page.wait_for_function("() => document.getElementById('push-settings').dataset.browserActive")
    page.get_by_role("button", name="Turn push notifications on").click()
    page.wait_for_function(
        "() => document.querySelector('[data-push-status]').textContent.includes('private window')"
    )
    status = page.locator("[data-push-status]").inner_text()
    assert "blocked for this site" in status and "without web push" in status
    assert "Reload the page" not in status and "permission denied" not in status
    page.get_by_role("link", name="Be told by e-mail instead").click()
    page.wait_for_url("**/settings/#email-h")
    assert page.get_by_label("E-mail address").is_visible()
    context.close()


def test_each_language_is_named_in_itself_and_the_search_hint_speaks_the_page(browser, live_server):
    for locale, hint in (("en-US", "e.g. detergent, coffee"), ("ja-JP", "例：洗剤、コーヒー")):
        context, page = phone(browser, locale)
        page.goto(f"{live_server.url}/")
        options = page.locator("footer select[name=language] option").all_inner_texts()
        assert options == ["日本語", "English"], (locale, options)
        assert page.get_by_role("searchbox").get_attribute("placeholder") == hint
        context.close()
