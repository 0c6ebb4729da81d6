"""Cached pages and page fragments: what is the same for every visitor — whole pages for a
visitor the page says nothing personal to (`page`), and otherwise the parts that are shared:
the category chips, "cheap right now", a page of all listings, a listing's facts and chart
(`fragment`) — rendered once per language and kept in the `pages` cache.

Every key carries a version. Most carry the *prices version*: `prices_changed()` moves it on,
so every cached page and fragment that shows prices is stale at once, in every web process.
A listing's own page and chart carry instead that *listing's version*, which
`listings_changed(ids)` moves on (with the prices version) once those listings are observed,
saved, paused or deleted — and `listing_pages_changed(ids)` alone once a check of them
failed (their pages say so; no price changed): the prices version moves with every
observation saved anywhere — about every minute — and a listing's page need not be rendered
again for another listing's price. A product's page carries its own *product version*,
which `products_changed(ids)` moves when the product's row changes or a listing joins it, and
the versions of its offers (`product_version`). All live in the shared `pages` cache (Redis
with REDIS_URL, else files under var/, which the web server and the cluster of `make run`
share). A fragment that
depends only on what its key names carries `PURE`, no version at all.
Entries also expire after FRAGMENT_SECONDS, for writers that do not tell, and when what they
show changes by the clock alone (a points campaign's end: `common.deadlines`).

As a key names one version, what it holds never changes: each process also keeps the last
LOCAL_ENTRIES it used in memory, so a page served again costs one read of the version from the
shared cache instead of a read (and unpickling) of the whole page.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from typing import TypeVar, cast

from django.contrib.messages import get_messages
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language

from common import deadlines

CACHE = "pages"
# A form fragment is rendered with this in place of the CSRF token, which is each visitor's
# own: `with_csrf` puts the request's token in.
CSRF_PLACEHOLDER = "csrf-token-of-the-request"
VERSION_KEY = "pages:prices-version"
LISTING_VERSION_KEY = "pages:listing-version:%d"
PRODUCT_VERSION_KEY = "pages:product-version:%d"
LISTING_VERSION_SECONDS = 86400
# The version of a fragment keyed on everything it is rendered from: never stale.
PURE = "pure"
FRAGMENT_SECONDS = 10 * 60
# About 20 KB each: a few MB per process at most.
LOCAL_ENTRIES = 256

T = TypeVar("T")

# key -> (expires at, value, the deadline of what it shows)
_local: OrderedDict[str, tuple[float, object, float]] = OrderedDict()
_local_lock = threading.Lock()


def prices_changed() -> None:
    """Make every cached page and fragment stale, for every process."""
    caches[CACHE].set(VERSION_KEY, _new_version(), timeout=None)


def prices_version() -> int:
    return _version(VERSION_KEY)


def listings_changed(listing_ids: Iterable[int]) -> None:
    """Make these listings' own pages stale, and every page that shows prices."""
    listing_pages_changed(listing_ids)
    prices_changed()


def listing_pages_changed(listing_ids: Iterable[int]) -> None:
    """Make these listings' own pages (and their products') stale, and no other: what
    changed shows only there — a check of the price that failed, which leaves every price
    as it was."""
    keys = [LISTING_VERSION_KEY % pk for pk in set(listing_ids)]
    if keys:
        # Forgotten rather than replaced: the next reader of the page makes a new version,
        # and most listings a poll or a re-fetch observes have no version at all (nobody
        # opened their page that day). Deleting a key that is not there costs next to nothing;
        # writing a version for each of 2,000 listings was a fifth of a dispatch cycle with the
        # file cache.
        caches[CACHE].delete_many(keys)


def listing_version(listing_id: int) -> int:
    # Read before the listing is (a cached page needs no query), so any id in a URL makes
    # one: a day's timeout keeps a crawler's made-up ids from piling up. An expired version
    # only means the page is rendered once more.
    return _version(LISTING_VERSION_KEY % listing_id, LISTING_VERSION_SECONDS)


def products_changed(product_ids: Iterable[int | None]) -> None:
    """Make these products' pages stale: their own row changed, or a listing joined them.
    (What their offers show moves with the offers' own versions.)"""
    keys = [PRODUCT_VERSION_KEY % pk for pk in set(product_ids) if pk is not None]
    if keys:
        caches[CACHE].delete_many(keys)


def product_version(product_id: int, offer_ids: Callable[[], list[int]]) -> str:
    """The version of a product's page: the product's own, and its offers' (`offer_ids()`
    reads which listings they are, kept under the product's version), so an offer observed,
    saved, paused or deleted makes the page stale as the product's own change does."""
    own = _version(PRODUCT_VERSION_KEY % product_id, LISTING_VERSION_SECONDS)
    ids = value("product-offer-ids", (product_id,), lambda: tuple(offer_ids()), own)
    keys = [LISTING_VERSION_KEY % pk for pk in ids]
    cache = caches[CACHE]
    versions = cache.get_many(keys)
    for key in keys:
        if key not in versions:
            versions[key] = _version(key, LISTING_VERSION_SECONDS)
    joined = ",".join([str(own), *(f"{key}={versions[key]}" for key in keys)])
    return hashlib.blake2b(joined.encode(), digest_size=12).hexdigest()


def _version(key: str, timeout: int | None = None) -> int:
    cache = caches[CACHE]
    version = cache.get(key)
    if version is None:
        mine = _new_version()
        cache.add(key, mine, timeout=timeout)
        # None when a change forgot it again in between: what is rendered now is kept under
        # a version nobody will read again, which is what that change asks for.
        version = cache.get(key) or mine
    return version


def _new_version() -> int:
    # Random rather than incr() (an evicted counter restarting at 1 would bring old pages
    # back) or the clock (two changes within one tick, or under a frozen test clock, would
    # share a version, and the second would show nothing new).
    return secrets.randbits(63)


def fragment(
    name: str, parts: tuple, render: Callable[[], str], version: int | str | None = None
) -> SafeString:
    """The HTML of fragment `name` for `parts` (what it varies on besides the language and
    the version: the prices version unless `version` is given), rendered by `render()` when
    it is not cached."""
    html = _cached(name, parts, lambda: str(render()), version)
    return mark_safe(html)  # noqa: S308 (our own rendered output)


def value(name: str, parts: tuple, compute: Callable[[], T], version: int | str | None = None) -> T:
    """What `compute()` returns (anything the cache can pickle, and never changed by its
    readers: a process shares it), kept as `fragment` keeps HTML — for figures a page
    computes from many rows and shows in several places."""
    return _cached(name, parts, compute, version)


def shared(request: HttpRequest, params: Collection[str] = ()) -> bool:
    """Whether `request` gets the same page as anyone else asking for its URL in its
    language: a GET or HEAD, with no message waiting to be shown to it, and no query
    parameter but `params` (each once), so the URL cannot make endless cache entries of one
    page."""
    if request.method not in ("GET", "HEAD"):
        return False
    if any(key not in params or len(request.GET.getlist(key)) > 1 for key in request.GET):
        return False
    # Loads the waiting messages without marking them shown: a page that has some renders
    # them as usual.
    return not len(get_messages(request))


def page(
    request: HttpRequest,
    name: str,
    parts: tuple,
    render: Callable[[str], str],
    version: int | str | None = None,
) -> HttpResponse:
    """The whole page `name` for `parts` (what it varies on besides the language, the
    version — as for `fragment` — and its URL), for a request `shared()` allows.
    `render(csrf_token)` renders it when it is not cached, with the token it is given in
    every form: a placeholder, replaced by this request's own token on the way out."""
    # The URL is part of the page: the language switch sends the visitor back to it.
    html = _cached(
        f"page-{name}",
        (*parts, request.get_full_path()),
        lambda: str(render(CSRF_PLACEHOLDER)),
        version,
    )
    return HttpResponse(with_csrf(request, html))


def _cached(
    name: str, parts: tuple, compute: Callable[[], T], version: int | str | None = None
) -> T:
    raw = "\x1f".join(str(part) for part in (get_language(), *parts))
    digest = hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()
    # Read before rendering: a page rendered from rows read before a change was committed
    # is kept under the version that change then moved on from.
    version = prices_version() if version is None else version
    key = f"pages:{version}:{name}:{digest}"
    now = time.time()
    with _local_lock:
        entry = _local.get(key)
    if entry is None or entry[0] <= now:
        cache = caches[CACHE]
        entry = cache.get(key)
        if entry is None:
            # Kept no longer than what it shows holds by the clock (a campaign's end).
            with deadlines.collecting() as deadline:
                computed = compute()
            expires = min(now + FRAGMENT_SECONDS, deadline.at)
            # The shared entry carries its expiry, so no process keeps it in memory longer.
            entry = (expires, computed, deadline.at)
            cache.set(key, entry, timeout=max(1, math.ceil(expires - now)))
        with _local_lock:
            _local[key] = entry
            while len(_local) > LOCAL_ENTRIES:
                _local.popitem(last=False)
    # A page built around this fragment expires with it (an entry written before entries
    # carried a deadline has none).
    deadlines.note(entry[2] if len(entry) > 2 else math.inf)
    return cast(T, entry[1])


def with_csrf(request: HttpRequest, html: str) -> SafeString:
    """A cached form fragment with this request's CSRF token in it."""
    return mark_safe(html.replace(CSRF_PLACEHOLDER, get_token(request)))  # noqa: S308
