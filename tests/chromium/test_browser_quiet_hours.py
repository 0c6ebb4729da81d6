"""Quiet hours set on /settings/ in Chromium: the form posts with the browser's own Origin,
a bad window is refused next to the form, a good one is said on the page; a notification
held by it says until when on /notifications/, and goes out at the window's end."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import time_machine
from django.utils import timezone

from demo.market import set_product
from outbox.dispatch import run_cycle
from outbox.enqueue import detections_for, enqueue_many
from outbox.models import Outbox, Reason, Status
from tests.browser import BROWSER_MARKS
from tests.factories import ListingFactory, WatchFactory
from watches.models import Channel, Device

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


def test_a_held_notification_says_until_when_in_chromium(browser, live_server, recording_channel):
    """The window saved in Chromium holds a detection made at 22:30 in Tokyo: the history
    page, opened in the browser with the device's own cookie, says until when; at 07:00 the
    row is re-checked on the fresh price and sent, and the page says what it told."""
    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    page = browser.new_context(locale="en-US").new_page()
    with time_machine.travel(dt.datetime(2026, 12, 1, 22, 30, tzinfo=tokyo), tick=False):
        page.goto(f"{live_server.url}/settings/")
        page.get_by_label("From").fill("22:00")
        page.get_by_label("Until").fill("07:00")
        with page.expect_response(lambda r: r.request.method == "POST") as posted:
            page.get_by_role("button", name="Save quiet hours").click()
        assert posted.value.status == 302
        page.wait_for_url("**/settings/#quiet-h")
        device = Device.objects.get()
        Device.objects.filter(pk=device.pk).update(channel=Channel.CONSOLE)
        device.refresh_from_db()
        watch = WatchFactory(device=device, listing=ListingFactory(price=1000), target_price=1200)
        assert enqueue_many(detections_for(watch, timezone.now(), {"value": "1000"})) == 1
        run_cycle()
        row = Outbox.objects.get()
        assert (row.status, row.reason) == (Status.RETRY, Reason.QUIET_HOURS)

        page.goto(f"{live_server.url}/notifications/")
        entry = page.locator("li.entry").first
        assert "On the way" in entry.inner_text()
        assert "Held until 07:00 (quiet hours)." in entry.inner_text()
        assert recording_channel.delivered == []

    set_product(watch.listing.item_code, price=900)
    with time_machine.travel(dt.datetime(2026, 12, 2, 7, 0, tzinfo=tokyo), tick=False):
        run_cycle()
        page.reload()
        entry = page.locator("li.entry").first
        assert "Sent" in entry.inner_text()
        assert "We told you: ¥900." in entry.inner_text()
        assert "Held until" not in page.content()
    assert len(recording_channel.delivered) == 1
