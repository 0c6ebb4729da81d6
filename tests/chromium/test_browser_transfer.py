"""Moving watches to another browser, in two Chromium contexts (two browsers as far as
cookies go): make the link in one, open it in the other, switch the language there, "move
here" — the watches now show in the second and no longer in the first. Every form POST of
these pages carries the Origin Chromium really sends, which Django's CSRF check verifies."""

from __future__ import annotations

import pytest

from tests.browser import ARTIFACTS, BROWSER_MARKS
from tests.factories import ListingFactory
from watches.models import Device, Watch

pytestmark = BROWSER_MARKS

NAME = "ネピア 鼻セレブ トイレットロール 18ロール"


@pytest.fixture
def listing(transactional_db):
    return ListingFactory(name=NAME, category="トイレットペーパー", price=1180)


def test_the_whole_transfer_between_two_browsers(browser, live_server, listing):
    first = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    second = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    old, new = first.new_page(), second.new_page()

    # The first browser watches an item (this makes its anonymous identity).
    old.goto(f"{live_server.url}/listings/{listing.pk}/")
    old.get_by_label("Tell me when", exact=True).select_option("lowest")
    old.get_by_role("button", name="Watch", exact=True).click()
    old.wait_for_url(f"**/listings/{listing.pk}/#your-watches")

    # …and makes a one-time link on its settings page.
    old.goto(f"{live_server.url}/settings/")
    response = None
    with old.expect_response("**/settings/transfer") as made:
        old.get_by_role("button", name="Make a one-time transfer link").click()
    response = made.value
    assert response.status == 200
    assert response.headers["referrer-policy"] == "same-origin"
    link = old.locator("[data-transfer-link]").input_value()
    assert link.startswith(f"{live_server.url}/transfer/")

    # The second browser opens it: a question, nothing moved yet.
    opened = new.goto(link)
    assert opened.status == 200 and opened.headers["referrer-policy"] == "same-origin"
    assert new.get_by_role("heading", level=1).inner_text() == "Move your watches to this browser?"

    # The language switch on this page works (it used to answer 403 under no-referrer).
    with new.expect_response(lambda r: r.url.endswith("/language")) as switched:
        new.locator("footer select[name=language]").select_option("ja")
        new.locator("footer form.lang button[type=submit]").click()
    assert switched.value.status == 302
    new.wait_for_url(link)
    assert (
        new.get_by_role("heading", level=1).inner_text() == "ウォッチをこのブラウザに移しますか？"
    )

    # "Move them here", in Japanese now.
    with new.expect_response(lambda r: r.request.method == "POST") as moved:
        new.get_by_role("button", name="ここに移す").click()
    assert moved.value.status == 302, "the CSRF check accepts the browser's own Origin"
    assert moved.value.request.headers["origin"] == live_server.url
    new.wait_for_url("**/settings/")
    assert "ウォッチをこのブラウザに移しました。" in new.locator(".messages").inner_text()

    new.goto(f"{live_server.url}/watches/")
    assert NAME in new.locator("li.watch-row").inner_text()
    new.screenshot(path=str(_artifacts() / "transfer-second-browser.png"), full_page=True)

    old.goto(f"{live_server.url}/watches/")
    assert old.locator("li.watch-row").count() == 0
    assert "You are not watching anything yet." in old.locator("main").inner_text()

    # One identity, now in the second browser; the link is burnt.
    assert Device.objects.count() == 1 and Watch.live.count() == 1
    assert new.goto(link).status == 404
    first.close()
    second.close()


def test_the_language_switch_works_on_the_settings_page_showing_a_link(
    browser, live_server, listing
):
    context = browser.new_context(viewport={"width": 360, "height": 740}, locale="en-US")
    page = context.new_page()
    page.goto(f"{live_server.url}/listings/{listing.pk}/")
    page.get_by_label("Tell me when", exact=True).select_option("lowest")
    page.get_by_role("button", name="Watch", exact=True).click()
    page.wait_for_url(f"**/listings/{listing.pk}/#your-watches")
    page.goto(f"{live_server.url}/settings/")
    page.get_by_role("button", name="Make a one-time transfer link").click()
    page.locator("[data-transfer-link]").wait_for()
    with page.expect_response(lambda r: r.url.endswith("/language")) as switched:
        page.locator("#lang-settings").select_option("ja")
        page.locator("section form.lang button[type=submit]").click()
    assert switched.value.status == 302
    # Back on the settings page (a GET of the POST-only link maker makes nothing new).
    page.wait_for_url("**/settings/#move-h")
    assert page.get_by_role("heading", level=1).inner_text() == "設定"
    assert Device.objects.get().transfer_token_hash is not None
    context.close()


def _artifacts():
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
