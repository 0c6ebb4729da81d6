"""The e-mail double opt-in in Chromium: enter an address on /settings/, the confirmation
mail arrives at a real SMTP server on 127.0.0.1, its link is opened and confirmed, and
/settings/ says so; then the unsubscribe link of a notification mail, clicked."""

from __future__ import annotations

import re

import pytest

from tests.browser import BROWSER_MARKS
from watches import email_address
from watches.models import Device

pytestmark = BROWSER_MARKS


def test_confirmation_flow_end_to_end_in_chromium(browser, live_server, smtp_server):
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
