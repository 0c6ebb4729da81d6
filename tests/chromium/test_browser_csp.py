"""The Content-Security-Policy in Debian's chromium: the whole journey — the pages in both
languages, a watch made and edited, the settings page with its service worker, the history,
a listing in a points campaign (its breakdown), a product found from a listing's JAN code and
one added by typing its JAN code (a wrong one first), the mails' confirm and unsubscribe
pages, a transfer link taken, the data deleted, the refusal and not-found pages, and the admin
as staff — sends the policy with every page and makes the browser report no violation
(neither a `securitypolicyviolation` event nor a console message). A control proves the
listener hears one."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from outbox.models import Outbox
from tests.browser import BROWSER_MARKS, STAFF_PASSWORD
from tests.factories import (
    DeviceFactory,
    DispatchRunFactory,
    ListingFactory,
    OutboxEventFactory,
    OutboxFactory,
    WatchFactory,
    device_with_cookie,
    with_history,
)
from watches.devices import create_transfer_link
from watches.email_address import confirm_token, unsubscribe_token
from watches.models import Device, Listing, Product, Watch

pytestmark = BROWSER_MARKS

# Reports each violation to the test, from every document the page loads.
LISTEN = """
window.__cspViolations = 0;
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations += 1;
  window.__cspViolation({
    page: location.pathname + location.search,
    directive: event.effectiveDirective,
    blocked: event.blockedURI,
    sample: event.sample,
    source: event.sourceFile + ":" + event.lineNumber,
  });
});
"""
WORKER_ACTIVE = """async () => {
  const registration = await navigator.serviceWorker.ready;
  return {scope: registration.scope, state: registration.active && registration.active.state};
}"""


class Journey:
    """A browser context whose pages report violations, console complaints about the policy,
    and every page's policy header, to lists the test reads."""

    def __init__(self, browser, live_server, locale: str) -> None:
        self.base = live_server.url
        self.context = browser.new_context(locale=locale, viewport={"width": 1280, "height": 900})
        self.violations: list[dict] = []
        self.console: list[str] = []
        self.policies: dict[str, str | None] = {}
        self.context.expose_binding("__cspViolation", lambda _source, v: self.violations.append(v))
        self.context.add_init_script(LISTEN)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("response", self._response)

    def _console(self, message) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.console.append(message.text)

    def _response(self, response) -> None:
        if response.request.resource_type == "document":
            path = response.url.removeprefix(self.base)
            self.policies[path] = response.headers.get("content-security-policy")

    def visit(self, path: str, expect_status: int = 200):
        response = self.page.goto(self.base + path)
        assert response.status == expect_status, (path, response.status)
        self.page.wait_for_load_state("load")
        return response

    def clean(self) -> None:
        assert self.violations == [], self.violations
        assert self.console == [], self.console
        unprotected = {p: v for p, v in self.policies.items() if not v or "'unsafe" in v}
        assert unprotected == {}, "pages without the policy, or with an unsafe source"
        for policy in self.policies.values():
            assert policy is not None  # every page has one (above)
            for part in ("script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
                assert part in policy, policy
            assert "form-action 'self'" in policy


@pytest.fixture
def world(transactional_db):
    now = timezone.now()
    listing = with_history(
        ListingFactory(
            name="スコッティ トイレットペーパー 12ロール", category="トイレットペーパー"
        ),
        [640, 620, None, 598],
        now=now,
    )
    failing = ListingFactory(name="UCC コーヒー 1kg", category="コーヒー")
    Listing.objects.filter(pk=failing.pk).update(
        last_error="bad_response", last_error_at=now, last_polled_at=now - dt.timedelta(hours=1)
    )
    product = Product.objects.create(jan="4901234567894", name="ティッシュ 5箱")
    ListingFactory(product=product, jan=product.jan, name="ティッシュ 5箱 (shop A)")
    User.objects.create_superuser("ops", "ops@example.test", STAFF_PASSWORD)
    row = OutboxFactory(watch=WatchFactory(listing=listing), status="sent", sent_at=now)
    OutboxEventFactory(outbox=row)
    DispatchRunFactory()
    # In a points campaign: 5× until the day after tomorrow, and points only members get.
    campaign = ListingFactory(
        name="アタック 洗濯洗剤 詰め替え",
        price=1980,
        shipping=0,
        points=99,
        point_rate=5,
        points_until=now + dt.timedelta(days=2),
        points_after=19,
        member_points=40,
    )
    return {"listing": listing, "product": product, "row": row, "campaign": campaign}


ADD_JAN = "4902011713107"  # typed in the JAN form
LISTING_JAN = "4902200000018"  # known to a listing, whose other shops are asked for


@pytest.fixture
def shops(yahoo):
    """Two shops of each JAN code at the fake Yahoo! Shopping."""
    for jan in (ADD_JAN, LISTING_JAN):
        for store, price in (("csp-a", 480), ("csp-b", 460)):
            yahoo.add(f"{store}_{jan}", jan=jan, price=price, name=f"ティッシュ {jan}")
    return yahoo


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_the_pages_and_the_service_worker_report_no_violation(
    browser, live_server, world, shops, lang
):
    journey = Journey(browser, live_server, {"en": "en-US", "ja": "ja-JP"}[lang])
    page = journey.page
    listing, product = world["listing"], world["product"]
    with_jan = ListingFactory(source="rakuten", item_code="csp-shop:tissue", jan=LISTING_JAN)

    journey.visit("/")
    page.fill("#q", "トイレ")
    page.press("#q", "Enter")
    page.wait_for_url("**/?q=*")
    journey.visit(f"/listings/{listing.pk}/")
    assert page.locator("figure.chart svg").count() == 1
    # The watch form, through its script (it shows the fields of the chosen trigger).
    page.fill("input[name=target_price]", "550")
    page.locator("form[data-watch-form] button[type=submit]").click()
    page.wait_for_load_state("load")
    watch = Watch.objects.get(listing=listing, device__isnull=False, target_price=550)
    journey.visit("/watches/")
    journey.visit(f"/watches/{watch.pk}/edit/")
    journey.visit(f"/products/{product.pk}/")
    journey.visit("/settings/")
    worker = page.evaluate(WORKER_ACTIVE)
    assert worker == {"scope": f"{live_server.url}/", "state": "activated"}
    journey.visit("/notifications/")
    # A listing in a points campaign: its breakdown, member-only points beside it.
    journey.visit(f"/listings/{world['campaign'].pk}/")
    assert page.locator(".breakdown").first.is_visible()
    # From a listing whose JAN code is known to its product (POST /listings/<id>/product).
    journey.visit(f"/listings/{with_jan.pk}/")
    page.locator(f"form[action='/listings/{with_jan.pk}/product'] button").click()
    page.wait_for_url("**/products/*/")
    assert page.locator("ol.offers .offer").count() == 3
    # Adding a product by its JAN code: a wrong check digit told on /products/add, then right.
    journey.visit("/")
    page.locator("#add-jan summary").click()
    page.fill("#add-jan input[name=jan]", ADD_JAN[:-1] + "0")
    page.locator("#add-jan button[type=submit]").first.click()
    page.wait_for_url("**/products/add")
    page.fill("#add-jan input[name=jan]", ADD_JAN)
    page.locator("#add-jan button[type=submit]").first.click()
    page.wait_for_url("**/products/*/")
    assert Product.objects.filter(jan=ADD_JAN).exists()
    # The mails' pages: confirming the address, and unsubscribing, each a GET then a POST.
    Device.objects.filter(pk=watch.device_id).update(email="me@mail.example")
    device = Device.objects.get(pk=watch.device_id)
    journey.visit(f"/email/confirm/{confirm_token(device)}/")
    page.locator("main form button[type=submit]").click()
    page.wait_for_url("**/settings/#email-h")
    journey.visit(f"/email/unsubscribe/{unsubscribe_token(device.pk, device.email)}/")
    page.locator("main form button[type=submit]").click()
    page.wait_for_load_state("load")
    assert not Device.objects.get(pk=device.pk).email
    # Moving another browser's watches here through its transfer link.
    journey.visit("/transfer/no-such-link/", expect_status=404)
    other = DeviceFactory()
    journey.visit(f"/transfer/{create_transfer_link(other)}/")
    page.locator("main form button[type=submit]").click()
    page.wait_for_url("**/settings/")
    # Deleting everything: the box ticked, the form sent.
    page.locator("#confirm-delete").check()
    page.locator("section[aria-labelledby=delete-h] button[type=submit]").click()
    page.wait_for_url("**/settings/")
    assert not Device.objects.filter(pk=other.pk).exists()
    journey.visit("/?q=abc%00", expect_status=400)
    journey.visit("/no-such-page/", expect_status=404)
    # The language switch (a form posting to this site, then back).
    page.locator("footer form.lang button:not([disabled])").first.click()
    page.wait_for_load_state("load")

    journey.clean()
    assert len(journey.policies) >= 20


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_the_admin_reports_no_violation(browser, live_server, world, lang):
    journey = Journey(browser, live_server, {"en": "en-US", "ja": "ja-JP"}[lang])
    page = journey.page
    journey.visit("/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", STAFF_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    row = world["row"]
    device, _ = device_with_cookie()
    for path in [
        "/admin/",
        "/admin/outbox/outbox/overview/",
        "/admin/outbox/outbox/",
        "/admin/outbox/outbox/?status__exact=sent",
        f"/admin/outbox/outbox/{row.pk}/change/",
        "/admin/outbox/dispatchrun/",
        "/admin/watches/listing/",
        f"/admin/watches/listing/{world['listing'].pk}/change/",
        "/admin/watches/watch/",
        "/admin/watches/device/",
        f"/admin/watches/device/{device.pk}/change/",
        "/admin/watches/product/",
        "/admin/demo/demoproduct/",
        "/admin/django_q/schedule/add/",  # date and time widgets
        "/admin/auth/user/",
        f"/admin/auth/user/{User.objects.get().pk}/change/",
        "/admin/auth/group/add/",  # the two-list permission picker
    ]:
        journey.visit(path)
    # An action's confirmation, through the changelist's own script.
    journey.visit("/admin/outbox/outbox/")
    page.locator("#result_list tbody input.action-select").first.check()
    assert Outbox.objects.exists()
    # The calendar pop-up of a date widget.
    journey.visit("/admin/django_q/schedule/add/")
    page.locator(".datetimeshortcuts a").first.click()
    # Logging out is a form posting to this site.
    page.locator("#logout-form button").click()
    page.wait_for_url("**/admin/logout/")

    journey.clean()


def test_the_listener_hears_a_violation(browser, live_server, world):
    """The control: an inline style attribute put in by script is reported, as an event and
    on the console."""
    journey = Journey(browser, live_server, "en-US")
    journey.visit("/")
    journey.page.evaluate(
        "document.body.insertAdjacentHTML('beforeend', '<p style=\"color: red\">x</p>')"
    )
    journey.page.wait_for_function("() => window.__cspViolations > 0")
    assert [v["directive"] for v in journey.violations] == ["style-src-attr"]
    assert len(journey.console) == 1 and "inline style" in journey.console[0]
