"""axe-core finds nothing on any page a person sees, in Japanese and English, on a phone
(360 px) and a desktop (1280 px): every kind of page, filled as a person who watches things
and has been told about them sees it — an offer in a points campaign among them, its
breakdown and members-only points on its listing page, the product page and My watches.

axe-core is vendored (tests/vendor/axe.min.js, see tests/vendor/README.md): the suite runs
offline, and a new version is a reviewed change, not a surprise in CI."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.utils import timezone

from outbox.models import Reason, Status
from tests.browser import BROWSER_MARKS
from tests.factories import (
    ListingFactory,
    OutboxFactory,
    WatchFactory,
    device_with_cookie,
    with_history,
)
from watches.devices import cookie_name, create_transfer_link
from watches.email_address import confirm_token, unsubscribe_token
from watches.models import Listing, NotifyVia, Product, Trigger

pytestmark = BROWSER_MARKS

AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"
JAN = "4901750404406"
NAME = "スコッティ フラワーパック 12ロール ダブル"
# What axe answers, reduced to what a failure message needs.
RUN_AXE = """async () => {
  const result = await axe.run(document);
  return result.violations.map(v => ({
    id: v.id,
    impact: v.impact,
    nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + ": " + n.failureSummary),
  }));
}"""


@pytest.fixture
def world(transactional_db):
    """A person's browser with watches, a product, notifications sent, held back and on the
    way, a confirmed e-mail address; the paths of every kind of page they may open."""
    now = timezone.now()
    device, token = device_with_cookie(
        email="me@mail.example", email_confirmed_at=now, notify_via=NotifyVia.BOTH
    )
    listing = with_history(
        ListingFactory(name=NAME, category="トイレットペーパー", price=548, last_polled_at=now),
        [600, 580, None, 560, 548] * 6,
        now=now,
    )
    other = ListingFactory(name=NAME, price=520, shipping=None, jan=JAN)
    # An offer in a points campaign (5×, until the day after tomorrow), with points only LYP
    # premium members get beside it: the cheapest after points, on the product page too.
    campaign = with_history(
        ListingFactory(
            name=NAME,
            source="yahoo",
            item_code="yasu-points_tp-12r",
            price=560,
            shipping=0,
            points=140,
            point_rate=5,
            points_until=now + dt.timedelta(days=2),
            points_after=28,
            member_points=56,
            last_polled_at=now,
        ),
        [600, 580, 560] * 10,
        now=now,
    )
    product = Product.objects.create(jan=JAN, name=NAME, units_per_pack=12, unit_label="roll")
    Listing.objects.filter(pk__in=[listing.pk, other.pk, campaign.pk]).update(
        product=product, jan=JAN
    )
    watch = WatchFactory(device=device, listing=listing, target_price=560)
    WatchFactory(device=device, listing=other, product=product, target_price=500)
    WatchFactory(device=device, listing=listing, trigger=Trigger.PRICE_DROP, drop_percent=10)
    WatchFactory(device=device, listing=campaign, target_price=450, after_points=True)
    message = {"title": NAME, "body": "¥548", "price": 548}
    OutboxFactory(
        watch=watch, channel="email", status=Status.SENT, sent_at=now, sent_message=message
    )
    OutboxFactory(watch=watch, status=Status.DROPPED, reason=Reason.CONDITION_LOST)
    OutboxFactory(
        watch=watch,
        status=Status.RETRY,
        reason=Reason.QUIET_HOURS,
        next_attempt_at=now + dt.timedelta(hours=3),
    )
    pages = {
        "home": "/",
        "search": "/?q=scottie",
        "category": "/?category=トイレットペーパー",
        "listing": f"/listings/{listing.pk}/",
        "listing in a points campaign": f"/listings/{campaign.pk}/",
        "product": f"/products/{product.pk}/",
        "my watches": "/watches/",
        "edit watch": f"/watches/{watch.pk}/edit/",
        "notifications": "/notifications/",
        "settings": "/settings/",
        "email confirm": f"/email/confirm/{confirm_token(device)}/",
        "email unsubscribe": f"/email/unsubscribe/{unsubscribe_token(device.pk, device.email)}/",
        "transfer": f"/transfer/{create_transfer_link(device)}/",
        "not found": "/listings/999999/",
    }
    return token, pages


def violations(page) -> list[dict]:
    page.add_script_tag(path=str(AXE))
    return page.evaluate(RUN_AXE)


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize("locale", ["ja-JP", "en-US"])
def test_no_page_has_an_accessibility_violation(browser, live_server, world, locale, width):
    token, pages = world
    # The vendored axe is added as a script of our own: the site's Content-Security-Policy
    # must not stop the checker, which is not the page.
    context = browser.new_context(
        viewport={"width": width, "height": 900}, locale=locale, bypass_csp=True
    )
    host = live_server.url.split("//", 1)[1].split(":")[0]
    context.add_cookies([{"name": cookie_name(), "value": token, "domain": host, "path": "/"}])
    page = context.new_page()
    found = {}
    for kind, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        if kind in ("listing in a points campaign", "product", "my watches"):
            # What is checked holds the points: the breakdown, and the members' note.
            assert page.locator(".breakdown").first.is_visible(), kind
        if kind == "listing in a points campaign":
            assert "LYP" in page.locator("main").inner_text()
        found[kind] = violations(page)
    # A form sent with a mistake: the error is next to the field.
    page.goto(f"{live_server.url}/")
    page.locator("details.add summary").first.click()
    page.locator("input[name=link]").fill("not a link")
    page.locator("input[name=link]").press("Enter")
    page.wait_for_load_state()
    found["a form with an error"] = violations(page)
    context.close()
    assert {kind: v for kind, v in found.items() if v} == {}
    assert len(found) == 15
