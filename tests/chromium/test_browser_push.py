"""The browser side of Web Push, in Debian's chromium driven by Playwright against the live
server: the service worker registers at /sw.js with root scope, nothing asks for permission
until the button is clicked, the worker shows pushes with the payload's tag (a duplicate
replaces the first), and a click can only lead to a path on this site."""

from __future__ import annotations

import json
import time

import pytest

from tests.browser import ARTIFACTS, BROWSER_MARKS

pytestmark = BROWSER_MARKS

# Counts what would prompt the person, without prompting: the page's own functions are
# replaced before any of its scripts run.
WATCH_PROMPTS = """
window.__permissionRequests = 0;
window.__subscribeCalls = 0;
if (window.Notification) {
  Notification.requestPermission = function () {
    window.__permissionRequests += 1;
    return Promise.resolve("denied");
  };
}
if (window.PushManager) {
  PushManager.prototype.subscribe = function () {
    window.__subscribeCalls += 1;
    return Promise.reject(new Error("no push service in tests"));
  };
}
"""

WORKER_READY = """async () => {
  const registration = await navigator.serviceWorker.ready;
  const worker = registration.active || registration.waiting || registration.installing;
  return {scope: registration.scope, script: worker.scriptURL};
}"""


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 360, "height": 740})
    page = context.new_page()
    page.add_init_script(WATCH_PROMPTS)
    yield page
    context.close()


def test_settings_page_registers_the_worker_and_asks_nothing_on_load(page, live_server):
    page.goto(f"{live_server.url}/settings/")
    registration = page.evaluate(WORKER_READY)
    button = page.locator("[data-push-toggle]")
    page.wait_for_function("() => document.getElementById('push-settings').dataset.browserActive")

    assert registration == {"scope": f"{live_server.url}/", "script": f"{live_server.url}/sw.js"}
    assert button.is_visible() and button.is_enabled()
    assert button.inner_text() == "Turn push notifications on"
    assert page.evaluate("Notification.permission") == "default"
    assert (
        page.evaluate("navigator.permissions.query({name: 'notifications'}).then(s => s.state)")
        == "prompt"
    )
    assert page.evaluate("window.__permissionRequests") == 0
    assert page.evaluate("window.__subscribeCalls") == 0

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "settings-push.png"), full_page=True)


def test_the_click_is_what_asks_for_permission(page, live_server):
    page.goto(f"{live_server.url}/settings/")
    page.evaluate(WORKER_READY)
    page.wait_for_function("() => document.getElementById('push-settings').dataset.browserActive")

    page.locator("[data-push-toggle]").click()
    page.wait_for_function("() => window.__permissionRequests > 0")

    assert page.evaluate("window.__permissionRequests") == 1
    # Refused (our stand-in says "denied"): nothing is subscribed, and the page says why.
    assert page.evaluate("window.__subscribeCalls") == 0
    assert "blocked" in page.locator("[data-push-status]").inner_text()
    assert page.get_by_role("link", name="Be told by e-mail instead →").is_visible()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/listings/5/", "/listings/5/"),
        ("/listings/5/?from=push#price", "/listings/5/?from=push#price"),
        ("//evil.example/phish", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("/\t/evil.example", "/"),
        ("/\n/evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("listings/5/", "/"),
        ("", "/"),
        (None, "/"),
        (42, "/"),
    ],
)
def test_a_notification_click_only_leads_to_a_path_on_this_site(page, live_server, path, expected):
    page.goto(f"{live_server.url}/settings/")
    page.add_script_tag(url=f"{live_server.url}/static/js/notification-target.js")
    target = page.evaluate(
        "([origin, path]) => self.yasugoroNotificationTarget(origin, path)",
        [live_server.url, path],
    )
    assert target == live_server.url + expected


def test_the_worker_shows_a_push_with_its_tag_and_a_duplicate_replaces_it(page, live_server):
    """A push delivered to the real service worker through Chromium's DevTools protocol."""
    context = page.context
    context.grant_permissions(["notifications"], origin=live_server.url)
    page.goto(f"{live_server.url}/settings/")
    page.evaluate(WORKER_READY)

    cdp = context.new_cdp_session(page)
    registrations = []
    cdp.on(
        "ServiceWorker.workerRegistrationUpdated",
        lambda e: registrations.extend(e["registrations"]),
    )
    cdp.send("ServiceWorker.enable")
    deadline = time.monotonic() + 60  # a bound on waiting under load, not on speed
    while not registrations and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    [registration] = [r for r in registrations if r["scopeURL"] == f"{live_server.url}/"]

    def push(payload: dict) -> None:
        cdp.send(
            "ServiceWorker.deliverPushMessage",
            {
                "origin": live_server.url,
                "registrationId": registration["registrationId"],
                "data": json.dumps(payload),
            },
        )

    message = {
        "title": "トイレットペーパー 12ロール",
        "body": "Now ¥980",
        "url": "/listings/7/",
        "tag": "w7-target_price-20260101",
        "icon": "http://insecure.example/icon.png",
        "listing": 7,
        "price": 980,
    }
    push(message)
    push({**message, "body": "Now ¥960"})  # the duplicate, same tag
    push({**message, "tag": "w8-lowest-20260101", "url": "https://evil.example/"})

    # Wait (generously: a loaded CI machine is slow) until all three pushes were handled: both
    # tags shown and the duplicate's body in place. A bound on waiting, not on speed.
    page.wait_for_function(
        """async () => {
          const list = await (await navigator.serviceWorker.ready).getNotifications();
          const first = list.find((n) => n.tag === "w7-target_price-20260101");
          return list.length >= 2 && first && first.body === "Now ¥960";
        }""",
        polling=100,
        timeout=60_000,
    )
    shown = page.evaluate(
        """async () => {
          const registration = await navigator.serviceWorker.ready;
          const list = await registration.getNotifications();
          return list.map((n) => ({title: n.title, body: n.body, tag: n.tag,
                                   renotify: n.renotify, icon: n.icon, data: n.data}));
        }"""
    )
    by_tag = {n["tag"]: n for n in shown}
    assert set(by_tag) == {"w7-target_price-20260101", "w8-lowest-20260101"}
    first = by_tag["w7-target_price-20260101"]
    assert first["body"] == "Now ¥960"  # replaced, not stacked
    assert first["title"] == "トイレットペーパー 12ロール"
    assert first["renotify"] is False
    assert first["icon"] == ""  # only https icons
    assert first["data"] == {"url": "/listings/7/"}
