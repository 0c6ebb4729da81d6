"""Rakuten Ichiba, through its Item Search API on openapi.rakuten.co.jp (docs/marketplaces.md):
one item by its code (`fetch`), or up to 30 items a request (`pages`): a shop's, most recently
updated first; every shop's offer of a JAN code or of a keyword, cheapest first, in stock
(`offers` is the JAN code's first page).

Every request names the application id (`applicationId`) and carries its access key in the
`accessKey` header — never in the URL, which can end up in logs —, and, when
`RAKUTEN_SITE_URL` is set (an application registered as a web application), that site as
`Origin` and `Referer`. The version is a setting of its own (`RAKUTEN_API_VERSION`) on the base
URL (`RAKUTEN_API_URL`): Rakuten retires versions with little notice.

We ask with `formatVersion=2` (items come flattened in `Items[]`) and, for one item,
`availability=0` (sold-out items are answered too, with `availability: 0`, so an out-of-stock
item keeps its name and price). Every outcome becomes an Observation or a FetchError kind:

- an item with `availability: 1` → Observation in stock; `availability: 0` → Observation out
  of stock (the dispatcher drops it `out_of_stock`, exactly as for `empty`);
- `count: 0` / no items → `empty`: the search has no offer for the code right now;
- HTTP 404 or `error: not_found` → `not_found`;
- HTTP 429 or `error: too_many_requests` → `rate_limited`, with the server's `Retry-After`;
- HTTP 5xx → `server`; a timeout or a refused/broken connection → `network`;
- what only a person can fix → `config`, its detail naming the setting or the registration:
  an unknown or retired version (400 "API Configuration not found"), no access key (400
  "accessKey must be present…"), an unknown application id (400 "specify valid
  applicationId"), a refused id or key (401, 403), a site or IP address the registration does
  not allow (403 …HTTP_REFERRER_MISSING / HTTP_REFERRER_NOT_ALLOWED / CLIENT_IP_NOT_ALLOWED).
  The rest of the batch then answers the same error without a request;
- malformed JSON, missing fields, wrong types, another 4xx → `bad_response`.

Errors come in two shapes, `{"error", "error_description"}` and the gateway's
`{"errors": {"errorCode", "errorMessage"}}`; either message is kept (clipped) in the detail.

Requests go through one `requests.Session` per adapter and the budget of the application ids
(`watches.marketplaces.ratelimit`): shared by every caller in the fleet with `REDIS_URL`, in the
process without. With several ids (`RAKUTEN_APP_IDS`) their allowances add up: each request
goes out under the id whose slot comes soonest, and a 429 holds off (and slows) that id only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from common.counters import count_marketplace_request
from common.retry_after import parse_retry_after
from common.text import clip
from watches.marketplaces.answers import (
    MAX_CONFIG_DETAIL,
    MAX_DETAIL,
    Malformed,
    each_readable,
    field,
    optional,
    request_failed,
    safe_url,
    whole_number,
    without_secrets,
)
from watches.marketplaces.base import (
    Ask,
    FetchError,
    FetchKind,
    FetchResult,
    Observation,
    Offers,
    OffersResult,
    Page,
    PageResult,
    Shape,
    probe_application,
    take_slot,
    unaskable,
)
from watches.marketplaces.ratelimit import (
    Budget,
    LimiterUnavailable,
    app_id_label,
    limiter_for,
)
from watches.points import MAX_RATE, holds, rakuten_points, window_end, window_time, with_tax

log = logging.getLogger("watches.marketplaces.rakuten")

_K = TypeVar("_K")
_R = TypeVar("_R")

# An answer's JSON object and when it came.
_Answer = tuple[dict[str, Any], dt.datetime]

# When the server says "too many requests" without saying for how long.
_DEFAULT_HOLD_OFF = 5.0
# Where the access key of an application is set: named in every detail about a key.
_KEY_SETTING = "RAKUTEN_ACCESS_KEY (or id:key in RAKUTEN_APP_IDS)"
# The documented ranges: `hits` 1–30 a request, `page` 1–100.
HITS_MAX = 30
PAGE_MAX = 100
# Each shape's parameters besides the key and the page. A shop's items come sold-out ones
# included (`availability=0`: a sold-out watched item is news too), offers in stock only.
_SHAPE_PARAMS: dict[Shape, tuple[str, dict[str, str | int]]] = {
    Shape.ITEM: ("itemCode", {"availability": 0}),
    Shape.SHOP: ("shopCode", {"sort": "-updateTimestamp", "availability": 0}),
    Shape.PRODUCT: ("keyword", {"sort": "+itemPrice", "availability": 1}),
    Shape.KEYWORD: ("keyword", {"sort": "+itemPrice", "availability": 1}),
}


class RakutenMarketplace:
    source = "rakuten"
    per_page = HITS_MAX
    max_page = PAGE_MAX
    shapes = frozenset(Shape)
    shop_by_update = True

    def __init__(self) -> None:
        self.keys: dict[str, str] = applications()
        if not self.keys:
            raise ImproperlyConfigured("RAKUTEN_APP_ID is not set")
        self.app_ids: list[str] = list(self.keys)
        self.version: str = settings.RAKUTEN_API_VERSION
        self.url: str = f"{settings.RAKUTEN_API_URL.rstrip('/')}/{self.version}"
        self.site: str = settings.RAKUTEN_SITE_URL
        self.timeout = (settings.RAKUTEN_CONNECT_TIMEOUT, settings.RAKUTEN_READ_TIMEOUT)
        self.max_wait: float = settings.RAKUTEN_MAX_WAIT_SECONDS
        self.budget = budget()
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "Yasugoro price watch"
        if self.site:
            self.session.headers["Origin"] = _origin(self.site)
            self.session.headers["Referer"] = self.site
        # What the rest of a batch answers without a request: the shared budget out of
        # reach, or a configuration fault (every request would get the same answer).
        self._stop: FetchError | None = None
        # The application id the last `_ask` sent a request under (None: it sent none).
        self._asked: str | None = None

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        """One request per item code."""
        return self._each(item_codes, self._item)

    def pages(self, asks: Iterable[Ask]) -> dict[Ask, PageResult]:
        """One request per ask (`PageSearch.pages`)."""
        return self._each(asks, self._page)

    def offers(self, jans: Iterable[str]) -> dict[str, OffersResult]:
        """Every shop's offer of each JAN code in stock, cheapest first: the first page of a
        keyword search for the code (Item Search has no JAN field: an item whose text carries
        the code is taken for an offer of it)."""
        return self._each(jans, self._offers)

    def shop_of(self, item_code: str) -> str | None:
        return shop_of(item_code)

    def _each(self, keys: Iterable[_K], ask: Callable[[_K], _R]) -> dict[_K, _R | FetchError]:
        results: dict[_K, _R | FetchError] = {}
        self._stop = None
        try:
            for key in dict.fromkeys(keys):
                if self._stop is not None:
                    results[key] = self._stop
                    continue
                self._asked = None
                results[key] = ask(key)
                if self._asked is not None:
                    count_marketplace_request(self.source, self._asked, results[key])
        finally:
            self.session.close()
        return results

    def _item(self, code: str) -> FetchResult:
        answer = self._ask({"itemCode": code, "availability": 0})
        return answer if isinstance(answer, FetchError) else read_item(code, *answer)

    def _page(self, ask: Ask) -> PageResult:
        refused = unaskable(ask, self.shapes, self.max_page)
        if refused is not None:
            return refused
        name, params = _SHAPE_PARAMS[ask.shape]
        answer = self._ask({name: ask.key, **params, "hits": HITS_MAX, "page": ask.page})
        return answer if isinstance(answer, FetchError) else read_page(ask, *answer)

    def _offers(self, jan: str) -> OffersResult:
        page = self._page(Ask(Shape.PRODUCT, jan))
        if isinstance(page, FetchError):
            return page
        offers: dict[str, Observation] = {}
        for item in page.items:
            offers.setdefault(item.item_code, item)
        if not offers:
            return FetchError(FetchKind.EMPTY, f"no offer for JAN {jan}")
        return Offers(
            jan=jan,
            offers=tuple(offers.values()),
            observed_at=page.observed_at,
            # An offer left unread is not gone: it may be in stock.
            complete=not page.unread and (page.total is None or page.total <= len(page.items)),
        )

    def _ask(self, params: Mapping[str, str | int]) -> _Answer | FetchError:
        """One request through the budget: the answer's JSON object and when it came, or
        what went wrong. A fault that stops the batch is kept in `_stop`."""
        slot = take_slot(self.budget, self.max_wait, only=self._probed_id())
        if isinstance(slot, FetchError):
            if slot.ours:  # no budget, no request: the rest of the batch is not asked
                self._stop = slot
            return slot
        self._asked = app_id = slot.app_id
        query = {"applicationId": app_id, "formatVersion": 2, "format": "json", **params}
        try:
            response = self.session.get(
                self.url,
                params=query,
                headers={"accessKey": self.keys[app_id]},
                timeout=self.timeout,
                allow_redirects=False,
            )
            body = response.content
        except requests.Timeout as exc:
            return FetchError(FetchKind.NETWORK, request_failed("timeout", exc))
        except requests.ConnectionError as exc:
            return FetchError(FetchKind.NETWORK, request_failed("connection failed", exc))
        except requests.RequestException as exc:
            return FetchError(FetchKind.NETWORK, request_failed("request failed", exc))
        answer = self._classify(app_id, response.status_code, response.headers, body)
        if isinstance(answer, FetchError) and answer.kind == FetchKind.CONFIG:
            self._stop = answer
        return answer

    def _probed_id(self) -> str | None:
        """The application id a halt's probe must go out under (the one whose fault halted
        Rakuten: `probe_application`), or None — any id will do."""
        label = probe_application.get()
        return next((i for i in self.app_ids if label and app_id_label(i) == label), None)

    def _classify(
        self, app_id: str, status: int, headers: Mapping[str, str], body: bytes
    ) -> _Answer | FetchError:
        if status != 200:
            body = without_secrets(body, [*self.keys, *self.keys.values()])
        try:
            data: Any = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        code, message = error_of(data, body if status != 200 else b"")
        said = f"HTTP {status}" + (f" {code}" if code else "") + (f": {message}" if message else "")

        if status == 429 or code == "too_many_requests":
            retry_after = parse_retry_after(headers.get("Retry-After"))
            hold = retry_after if retry_after is not None else _DEFAULT_HOLD_OFF
            try:
                self.budget.hold_off(app_id, hold)
            except LimiterUnavailable:
                log.warning("could not record a 429 in the shared rate limiter")
            return FetchError(
                FetchKind.RATE_LIMITED, clip(said, MAX_DETAIL), retry_after=retry_after
            )
        if status >= 500:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            return FetchError(FetchKind.SERVER, clip(said, MAX_DETAIL), retry_after=retry_after)
        fix = self._what_to_fix(app_id, status, f"{code} {message}")
        if fix:
            return FetchError(
                FetchKind.CONFIG,
                clip(f"{fix} (Rakuten said {said})", MAX_CONFIG_DETAIL),
                application=app_id_label(app_id),
            )
        if status == 404 or code == "not_found":
            return FetchError(FetchKind.NOT_FOUND, clip(said, MAX_DETAIL))
        if status != 200 or code:
            return FetchError(FetchKind.BAD_RESPONSE, clip(said, MAX_DETAIL))
        if not isinstance(data, dict):
            return FetchError(FetchKind.BAD_RESPONSE, "the answer is not a JSON object")
        return data, timezone.now()

    def _what_to_fix(self, app_id: str, status: int, said: str) -> str:
        """What a person must do for Rakuten to answer again, in words; '' when the answer
        is not a configuration fault. Ids appear only as their label, keys never."""
        application = f"application #{app_id_label(app_id)}"
        if status == 400 and "API Configuration not found" in said:
            return (
                f"Rakuten has no Item Search version {self.version} (retired or mistyped): set "
                "RAKUTEN_API_VERSION to a version its documentation lists"
            )
        if status == 400 and "accessKey must be present" in said:
            return f"Rakuten got no access key: set {_KEY_SETTING} for {application}"
        if status == 400 and "valid applicationId" in said:
            return (
                f"Rakuten does not know {application}: set RAKUTEN_APP_ID (or RAKUTEN_APP_IDS) "
                "to an application id registered on Rakuten Developers since February 2026"
            )
        if status == 401:
            return (
                f"Rakuten refused {application} and its access key: check the id and "
                f"{_KEY_SETTING} against Rakuten Developers"
            )
        if status != 403:
            return ""
        if "HTTP_REFERRER_MISSING" in said:
            return (
                f"Rakuten wants the site {application} is registered for: set "
                "RAKUTEN_SITE_URL to that site's address"
            )
        if "HTTP_REFERRER_NOT_ALLOWED" in said:
            return (
                f"Rakuten does not allow the site in RAKUTEN_SITE_URL for {application}: set it "
                "to the site registered, or add this site to the application on Rakuten "
                "Developers"
            )
        if "CLIENT_IP_NOT_ALLOWED" in said:
            return (
                f"Rakuten does not allow this server's IP address for {application}: add it "
                "to the application's allowed IP addresses on Rakuten Developers"
            )
        if "access key" in said.lower() or "accesskey" in said.lower():
            return f"Rakuten refused the access key: set {_KEY_SETTING} to the key of {application}"
        return f"Rakuten refused {application}: check its registration on Rakuten Developers"


def applications() -> dict[str, str]:
    """The configured application ids, each with its access key: `RAKUTEN_APP_IDS` with
    `RAKUTEN_ACCESS_KEYS`, else `RAKUTEN_APP_ID` with `RAKUTEN_ACCESS_KEY` (settings refuse
    an id without its key at start-up; so does this, for settings changed since)."""
    ids = settings.RAKUTEN_APP_IDS or [settings.RAKUTEN_APP_ID]
    keys: dict[str, str] = {}
    for app_id in dict.fromkeys(ids):
        if not app_id:
            continue
        key = settings.RAKUTEN_ACCESS_KEYS.get(app_id) or (
            settings.RAKUTEN_ACCESS_KEY if app_id == settings.RAKUTEN_APP_ID else ""
        )
        if not key:
            raise ImproperlyConfigured(
                f"Rakuten application #{app_id_label(app_id)} has no access key: set {_KEY_SETTING}"
            )
        keys[app_id] = key
    return keys


def app_ids() -> list[str]:
    """The configured application ids: `RAKUTEN_APP_IDS`, else `RAKUTEN_APP_ID`."""
    return list(applications())


def budget() -> Budget:
    """The requests Rakuten allows us: every application id at `RAKUTEN_RATE_PER_SECOND`."""
    rate = settings.RAKUTEN_RATE_PER_SECOND
    return Budget({app_id: limiter_for("rakuten", app_id, rate) for app_id in app_ids()})


def error_of(data: Any, body: bytes = b"") -> tuple[str, str]:
    """The code and message of an error answer, in either of Rakuten's shapes —
    `{"error": …, "error_description": …}` or `{"errors": {"errorCode": …, "errorMessage":
    …}}` —, or the start of a body that is not JSON; ('', '') for an answer that is no error."""
    if isinstance(data, dict):
        if data.get("error") is not None:
            return clip(str(data["error"]), 60), clip(str(data.get("error_description") or ""), 120)
        errors = data.get("errors")
        if isinstance(errors, list) and errors:
            errors = errors[0]
        if isinstance(errors, dict):
            code, message = errors.get("errorCode"), errors.get("errorMessage")
            return clip(str(code or ""), 60), clip(str(message or ""), 120)
        return "", ""
    text = body.decode("utf-8", "replace").strip() if body else ""
    return "", clip(" ".join(text.split()), 120)


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def read_item(code: str, data: Mapping[str, Any], now: dt.datetime) -> FetchResult:
    """The one item `code` of an answer, or what the answer says instead."""
    try:
        items = _items(data)
        if not items:
            return FetchError(FetchKind.EMPTY, f"no offer for {code}")
        for item in items:
            if item.get("itemCode") == code:
                return parse_item(item, now)
        raise Malformed(f"the answer is about another item, not {code}")
    except Malformed as exc:
        return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), MAX_DETAIL))


def read_page(ask: Ask, data: Mapping[str, Any], now: dt.datetime) -> PageResult:
    """Every item of one page of an answer, in its order."""
    try:
        items, unread = each_readable(_items(data), lambda item: parse_item(item, now))
        total = optional(data, "count", int)
        pages = optional(data, "pageCount", int)
    except Malformed as exc:
        return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), MAX_DETAIL))
    if pages is None and total is not None:
        pages = math.ceil(total / HITS_MAX)
    last = None if pages is None else max(1, min(pages, PAGE_MAX))
    return Page(
        ask=ask, items=tuple(items), observed_at=now, total=total, last_page=last, unread=unread
    )


def _items(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The items of a `formatVersion=2` answer (`Items`; `items` in some gateway answers).
    Raises Malformed."""
    key = "Items" if "Items" in data or "items" not in data else "items"
    count = optional(data, "count", int)
    items: list[Mapping[str, Any]] = field(data, key, list)
    if count == 0:
        return []
    if not all(isinstance(item, dict) for item in items):
        raise Malformed("Items must be objects (formatVersion=2)")
    return items


def parse_item(item: Mapping[str, Any], now: dt.datetime) -> Observation:
    """One item of a `formatVersion=2` answer. Raises Malformed."""
    code = field(item, "itemCode", str)
    # A number, or a string of digits ("3290": seen on the new host).
    price = whole_number(item, "itemPrice")
    if price < 0:
        raise Malformed("itemPrice is negative")
    availability = field(item, "availability", int)
    if availability not in (0, 1):
        raise Malformed(f"availability must be 0 or 1, got {availability}")
    name = field(item, "itemName", str)
    postage = optional(item, "postageFlag", int)
    images = optional(item, "mediumImageUrls", list) or []
    if not all(isinstance(url, str) for url in images):
        raise Malformed("mediumImageUrls must be a list of strings (formatVersion=2)")
    shop = optional(item, "shopCode", str) or shop_of(code) or ""
    points = read_points(item, price, now)
    if item.get("taxFlag") == 1:
        # 税別: the price before tax. Every price we show and compare is what the shopper
        # pays (the points are counted on the tax-excluded price above).
        price = with_tax(price)
    return Observation(
        item_code=code[:200],
        price=price,
        # postageFlag 0: shipping included; 1: shipping extra, amount not in the API.
        shipping=0 if postage == 0 else None,
        in_stock=availability == 1,
        observed_at=now,
        name=name[:500],
        url=safe_url(optional(item, "itemUrl", str)),
        image_url=safe_url(images[0] if images else None),
        shop_name=(optional(item, "shopName", str) or "")[:200],
        extra={"shop": shop[:200]},
        points=points.now,
        points_until=points.until,
        points_after=points.after,
        point_rate=points.rate,
    )


class _Points(NamedTuple):
    now: int  # what everyone gets at the answer's moment
    until: dt.datetime | None = None  # the campaign counted in `now` ends then (exclusive)
    after: int | None = None  # what is left once it ended
    rate: int | None = None  # its multiplier


def read_points(item: Mapping[str, Any], price: int, now: dt.datetime) -> _Points:
    """The points of one item at `now` (docs/marketplaces.md, "Points"): `pointRate` points
    per ¥100 of the tax-excluded price (`taxFlag` 0: the price includes the tax; 1: it does
    not) while the window `pointRateStartTime`–`pointRateEndTime` holds (Japan time, empty
    when none; the end names its last minute); the standard 1 outside it. Raises
    Malformed."""
    tax_flag = optional(item, "taxFlag", int)
    if tax_flag not in (None, 0, 1):
        raise Malformed(f"taxFlag must be 0 or 1, got {tax_flag}")
    said = item.get("pointRate")
    rate = 1 if said is None else _multiplier(said)
    if rate is None:
        raise Malformed(
            f"pointRate must be a multiplier from 0 to {MAX_RATE}, got {clip(repr(said), 40)}"
        )
    start = _window_time(item, "pointRateStartTime")
    last = _window_time(item, "pointRateEndTime")
    try:
        end = window_end(last) if last is not None else None
    except OverflowError:
        # "9999-12-31 23:59": until further notice, as a multiplier without an end.
        end = None
    if start is not None and end is not None and end <= start:
        raise Malformed("pointRateEndTime is before pointRateStartTime")
    tax_included = tax_flag != 1
    standard = rakuten_points(price, 1, tax_included=tax_included)
    if rate <= 1 or not holds(start, end, now):
        # No campaign, or one that has ended or not started: the standard points (none at
        # a multiplier of 0).
        return _Points(standard if rate else 0)
    campaign = rakuten_points(price, rate, tax_included=tax_included)
    if end is None:
        # A multiplier without an end: it holds until an answer says otherwise.
        return _Points(campaign, rate=rate)
    return _Points(campaign, until=end, after=standard, rate=rate)


def _multiplier(value: object) -> int | None:
    """A multiplier as the API may send it — 5, 5.0 or "5" — or None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= MAX_RATE else None


def _window_time(item: Mapping[str, Any], key: str) -> dt.datetime | None:
    text = optional(item, key, str)
    try:
        return window_time(text or "")
    except ValueError:
        raise Malformed(
            f"{key} must be 'YYYY-MM-DD HH:MM' (Japan time) or empty, got {clip(repr(text), 40)}"
        ) from None


def shop_of(item_code: str) -> str | None:
    """The shop code of a Rakuten item code (`shop:item`), or None."""
    shop, colon, item = item_code.partition(":")
    return shop if colon and shop and item else None
