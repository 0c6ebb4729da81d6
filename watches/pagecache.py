"""Cached page fragments: the parts of a page that are the same for every visitor — the
category chips, "cheap right now", a page of all listings, a listing's facts and chart —
rendered once per language and kept in the `pages` cache.

Every key carries the current *prices version*. `prices_changed()` (called once observations
are saved, by polling or the dispatcher's re-fetch) moves the version on, so every fragment
showing a price is stale at once, in every web process: the version lives in the shared
`pages` cache (Redis with REDIS_URL, else files under var/, which the web server and the
cluster of `make run` share).
Fragments also expire after FRAGMENT_SECONDS, for writers that do not call it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from django.core.cache import caches
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language

CACHE = "pages"
# A form fragment is rendered with this in place of the CSRF token, which is each visitor's
# own: `with_csrf` puts the request's token in.
CSRF_PLACEHOLDER = "csrf-token-of-the-request"
VERSION_KEY = "pages:prices-version"
FRAGMENT_SECONDS = 10 * 60


def prices_changed() -> None:
    """Make every cached fragment that shows a price stale, for every process."""
    # A fresh value rather than incr(): an evicted counter restarting at 1 could bring old
    # fragments back.
    caches[CACHE].set(VERSION_KEY, time.time_ns(), timeout=None)


def prices_version() -> int:
    cache = caches[CACHE]
    version = cache.get(VERSION_KEY)
    if version is None:
        cache.add(VERSION_KEY, time.time_ns(), timeout=None)
        version = cache.get(VERSION_KEY)
    return version


def fragment(name: str, parts: tuple, render: Callable[[], str]) -> SafeString:
    """The HTML of fragment `name` for `parts` (what it varies on besides the language and
    the prices version), rendered by `render()` when it is not cached."""
    raw = "\x1f".join(str(part) for part in (get_language(), *parts))
    digest = hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()
    key = f"pages:{prices_version()}:{name}:{digest}"
    cache = caches[CACHE]
    html = cache.get(key)
    if html is None:
        html = str(render())
        cache.set(key, html, timeout=FRAGMENT_SECONDS)
    return mark_safe(html)  # noqa: S308 (our own rendered template output)


def with_csrf(request: HttpRequest, html: str) -> SafeString:
    """A cached form fragment with this request's CSRF token in it."""
    return mark_safe(html.replace(CSRF_PLACEHOLDER, get_token(request)))  # noqa: S308
