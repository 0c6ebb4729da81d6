"""Quiet hours set on /settings/ in Chromium: the form posts with the browser's own Origin,
a bad window is refused next to the form, a good one is said on the page."""

from __future__ import annotations

import datetime as dt

from tests.browser import BROWSER_MARKS
from watches.models import Device

pytestmark = BROWSER_MARKS


def test_setting_quiet_hours_in_chromium(browser, live_server):
    page = browser.new_context(locale="en-US").new_page()
    page.goto(f"{live_server.url}/settings/")
    assert (
        "Off: notifications go out at any hour." in page.locator("[data-quiet-status]").inner_text()
    )

    page.get_by_label("From").fill("22:00")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Save quiet hours").click()
    assert posted.value.status == 400
    assert (
        "Give both times"
        in page.locator("#quiet-h ~ form, section[aria-labelledby=quiet-h]").first.inner_text()
    )
    assert Device.objects.count() == 0

    page.get_by_label("From").fill("22:00")
    page.get_by_label("Until").fill("07:00")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Save quiet hours").click()
    assert posted.value.status == 302, "the CSRF check accepts the browser's own Origin"
    page.wait_for_url("**/settings/#quiet-h")
    assert (
        "Nothing is sent from 22:00 to 07:00 (Asia/Tokyo)"
        in page.locator("[data-quiet-status]").inner_text()
    )
    device = Device.objects.get()
    assert (device.quiet_start, device.quiet_end) == (dt.time(22, 0), dt.time(7, 0))
