"""The Content-Security-Policy header on every kind of answer, and templates that need no inline
script or style (tests/chromium/test_browser_csp.py checks the same in chromium, where it is
installed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.factories import ListingFactory

pytestmark = pytest.mark.django_db

TEMPLATES = Path(settings.BASE_DIR) / "templates"
# Mail is read in a mail client, not under the site's policy: inline styles are how mail is styled.
MAIL = ("outbox/email/", "watches/email/")
INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"<style\b", re.I), "a <style> element"),
    (re.compile(r"\sstyle=", re.I), "a style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "an event handler attribute"),
    (re.compile(r"=\s*\"?javascript:", re.I), "a javascript: URL"),
]


def test_the_policy_forbids_inline_script_and_style_framing_and_foreign_forms():
    directives = settings.CONTENT_SECURITY_POLICY["DIRECTIVES"]
    assert directives["script-src"] == directives["style-src"] == ["'self'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["form-action"] == ["'self'"]
    assert directives["object-src"] == directives["base-uri"] == ["'none'"]
    assert not any("'unsafe" in source for sources in directives.values() for source in sources)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/", 200),
        ("/?q=%00", 400),
        ("/no-such-page/", 404),
        ("/sw.js", 200),
        ("/me/history.json", 404),
        ("/admin/", 200),
        ("/admin/outbox/outbox/", 200),
    ],
)
def test_every_kind_of_answer_carries_the_policy(client, path, status):
    ListingFactory()
    client.force_login(User.objects.create_superuser("ops", "ops@example.test", "pw"))
    response = client.get(path)
    assert response.status_code == status
    policy = response["Content-Security-Policy"]
    for part in ("script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"):
        assert part in policy


def test_no_page_template_has_inline_script_or_style():
    found = []
    for template in sorted(TEMPLATES.rglob("*.html")):
        name = template.relative_to(TEMPLATES).as_posix()
        if name.startswith(MAIL):
            continue
        text = template.read_text()
        found += [f"{name}: {what}" for pattern, what in INLINE if pattern.search(text)]
    assert found == []


def test_the_check_finds_inline_script_and_style():
    text = '<p style="x"><script>alert(1)</script><a onclick="x" href="javascript:x">'
    assert [what for pattern, what in INLINE if pattern.search(text)] == [
        "an inline <script>",
        "a style attribute",
        "an event handler attribute",
        "a javascript: URL",
    ]
