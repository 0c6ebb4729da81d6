"""Shared set-up of the browser tests: Debian's chromium driven by Playwright (never a
browser Playwright downloads), skipped with a reason where chromium is missing.

The pages' Content-Security-Policy forbids eval: give `wait_for_function` a function
("() => …"), which Playwright compiles once, never a bare expression, which it evaluates again
on every poll and the browser then refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

# `pytestmark = BROWSER_MARKS` in a browser test module.
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not at /usr/bin/chromium (`make browser` installs it)",
    ),
]


@pytest.fixture
def browser(monkeypatch, transactional_db):
    """A headless chromium for one test, against pytest-django's live server."""
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; Django would otherwise refuse
    # database calls from it (tests read and write rows between page actions).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()
            # Inside sync_playwright() the test's own queries get a connection of their own,
            # which nothing else closes: close it, or PostgreSQL refuses to drop the test
            # database ("accessed by other users").
            connections.close_all()


STAFF_PASSWORD = "correct horse battery"


def log_in(browser, live_server, *, lang: str = "en", size: tuple[int, int] = (1280, 900)):
    """A page of staff user `ops` (create it first) logged in through the admin's own login
    form, in a browser speaking `lang`, on /admin/."""
    width, height = size
    context = browser.new_context(
        viewport={"width": width, "height": height},
        locale={"ja": "ja-JP", "en": "en-US"}[lang],
    )
    page = context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", STAFF_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    return page


@pytest.fixture
def staff_page(browser, live_server):
    """A page of a superuser logged in through the admin's own login form, on /admin/."""
    from django.contrib.auth.models import User

    User.objects.create_superuser("ops", "ops@example.test", STAFF_PASSWORD)
    return log_in(browser, live_server)
