"""The e-mail double opt-in in Chromium: enter an address on /settings/, the confirmation
mail arrives at a real SMTP server on 127.0.0.1, its link is opened and confirmed, and
/settings/ says so; then the unsubscribe link of a notification mail, clicked; and "Tell me
by" switched to push only while a mail waits."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.enqueue import detections_for, enqueue_many
from tests.browser import BROWSER_MARKS
from tests.factories import ListingFactory, WatchFactory
from tests.outbox_helpers import push_sent_and_mail_dropped_channel_off
from watches import email_address
from watches.models import Channel, Device, NotifyVia

pytestmark = BROWSER_MARKS


def test_confirmation_flow_end_to_end_in_chromium(browser, live_server, smtp_server, settings):
    # Every mailed link points at SITE_URL, never at the host a request named.
    settings.SITE_URL = live_server.url
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    page = context.new_page()
    page.goto(f"{live_server.url}/settings/")
    assert page.locator("[data-email-status]").get_attribute("data-email-status") == "none"

    page.get_by_label("E-mail address").fill("watcher@mail.example")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Add the address").click()
    assert posted.value.status == 302, "the CSRF check accepts the browser's own Origin"
    page.wait_for_url("**/settings/#email-h")
    assert (
        "We sent a confirmation link to watcher@mail.example"
        in page.locator(".messages").inner_text()
    )
    assert page.locator("[data-email-status]").get_attribute("data-email-status") == "pending"

    [mail] = smtp_server.messages()
    assert mail["To"].strip() == "watcher@mail.example"
    text = mail.get_body(preferencelist=("plain",)).get_content()
    link = re.search(r"(https?://\S+/email/confirm/\S+/)", text).group(1)
    assert link.startswith(live_server.url)

    opened = page.goto(link)
    assert opened.status == 200 and opened.headers["referrer-policy"] == "same-origin"
    with page.expect_response(lambda r: r.request.method == "POST") as confirmed:
        page.get_by_role("button", name="Confirm", exact=True).click()
    assert confirmed.value.status == 302
    page.wait_for_url("**/settings/#email-h")
    assert "watcher@mail.example is confirmed." in page.locator(".messages").inner_text()
    assert page.locator("[data-email-status]").get_attribute("data-email-status") == "confirmed"
    assert Device.objects.get().email_active

    # The unsubscribe link a notification carries: a question, then one button, no cookie.
    device = Device.objects.get()
    other = browser.new_context(locale="en-US").new_page()
    other.goto(
        f"{live_server.url}/email/unsubscribe/"
        f"{email_address.unsubscribe_token(device.pk, device.email)}/"
    )
    with other.expect_response(lambda r: r.request.method == "POST") as unsubscribed:
        other.get_by_role("button", name="Unsubscribe").click()
    assert unsubscribed.value.status == 200
    assert "We removed the address." in other.locator("[data-unsubscribed]").inner_text()
    device.refresh_from_db()
    assert device.email == ""
    context.close()


@pytest.mark.parametrize("address", ["not an address"])
def test_a_bad_address_shows_the_message_next_to_the_field(browser, live_server, address):
    page = browser.new_context(locale="en-US").new_page()
    page.goto(f"{live_server.url}/settings/")
    page.get_by_label("E-mail address").fill(address)
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Add the address").click()
    assert posted.value.status == 400
    assert "Enter a valid e-mail address" in page.locator(".field.invalid").inner_text()
    assert Device.objects.count() == 0


def test_switching_to_push_only_in_chromium_keeps_a_waiting_mail_from_going_out(
    browser, live_server, smtp_server, recording_channel
):
    """The "Tell me by" choice saved in Chromium (its own Origin): a device told by both
    switches to push notifications while both rows of a detection wait; the dispatcher then
    sends the push and drops the mail `channel_off`."""
    page = browser.new_context(locale="en-US").new_page()
    page.goto(f"{live_server.url}/settings/")
    page.get_by_label("Both", exact=True).check()
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.locator("form[action$='/settings/channels']").get_by_role("button").click()
    assert posted.value.status == 302, "the CSRF check accepts the browser's own Origin"
    device = Device.objects.get()
    assert device.notify_via == NotifyVia.BOTH
    Device.objects.filter(pk=device.pk).update(
        channel=Channel.CONSOLE, email="both@mail.example", email_confirmed_at=timezone.now()
    )
    device.refresh_from_db()
    watch = WatchFactory(device=device, listing=ListingFactory(price=1000), target_price=1200)
    assert enqueue_many(detections_for(watch, timezone.now(), {"value": "1000"})) == 2

    page.get_by_label("Push notifications", exact=True).check()
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.locator("form[action$='/settings/channels']").get_by_role("button").click()
    assert posted.value.status == 302
    page.wait_for_url("**/settings/#email-h")
    assert "Saved." in page.locator(".messages").inner_text()
    run_cycle()

    push_sent_and_mail_dropped_channel_off(smtp_server)
