"""Yahoo! Shopping, through its Item Search API v3 (`itemSearch`; docs/marketplaces.md):

- one item by its code (`store_item`, as in https://store.shopping.yahoo.co.jp/store/item.html):
  asked as `seller_id=store&query=item`, the hit whose `code` is the item's answers; no such
  hit is `empty` (the search has no offer for it right now);
- every shop's offer of a JAN code, cheapest first (`jan_code=…&sort=+price`), in one
  request: the same budget that buys one item buys a whole product;
- pages of up to 50 items (`pages`): a store's (`seller_id`, by review count: the API
  documents no sort by update time, and that order is the most stable of those it documents,
  so walking a store's pages meets each item once), a JAN code's or a query's offers in stock,
  cheapest first. `start + results` may not pass 1000: 20 pages of a key at most.

Each hit becomes an Observation: `price` (yen, tax included), `inStock`, the store's name, the
item's link and medium image. Shipping is what `shipping.code` says: 2 (送料無料) is free,
0 yen; 1 (no setting) and 3 (free under a condition, such as a minimum order) are *unknown*,
kept as None and never taken for zero. The outcomes of the outside world are the kinds of the
marketplace protocol, as for Rakuten:

- HTTP 429 → `rate_limited`, with the server's `Retry-After` (the limiter holds off that long,
  or 5 s when it does not say); HTTP 5xx → `server`; 404 → `not_found`;
- a timeout or a refused/broken connection → `network`;
- an application id Yahoo refuses (401, 403) or does not get (400 "Authentication parameters
  in your request incompleted") → `config`, its detail naming `YAHOO_APP_ID`: asking again
  changes nothing until a person acts, so the rest of the batch answers the same error
  without a request;
- malformed JSON, missing fields, wrong types, another 4xx → `bad_response`; no hit →
  `empty`.

Errors come as JSON (`{"Error": {"Message": "…"}}`) or, from Yahoo's gateway, as XML
(`<Error><Message>…</Message></Error>`); either message is kept (clipped) in the detail.

Requests go through one `requests.Session` per adapter and the budget of the application id
(`budget()`: `limiter_for("yahoo", app_id, rate)`, `watches.marketplaces.ratelimit`), as
Rakuten's do: with REDIS_URL the fleet's shared budget — price polling, product polling and
every dispatcher on every host take their slots from it, and a 429 holds all of them off —
otherwise the process's. An unreachable shared budget is `rate_limited` without a request
(the rest of the batch is not asked either). Yahoo's budget (1 query/s per application) is
separate from Rakuten's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

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
    take_slot,
    unaskable,
)
from watches.marketplaces.ratelimit import Budget, LimiterUnavailable, limiter_for

_K = TypeVar("_K")
_R = TypeVar("_R")

log = logging.getLogger("watches.marketplaces.yahoo")

# An answer's JSON object and when it came.
_Answer = tuple[dict[str, Any], dt.datetime]

# When the server says "too many requests" without saying for how long.
_DEFAULT_HOLD_OFF = 5.0
# shipping.code: 1 no setting, 2 free, 3 free under a condition. Only 2 says what it costs.
_FREE_SHIPPING = 2
# Hits asked for when looking up one item within its store: the item's own code usually
# comes first, but a store's search also matches its other items.
_ITEM_HITS = 10
# The most `results` one request answers, and the window `start + results` must stay in.
RESULTS_MAX = 50
RESULTS_WINDOW = 1000
# Each page shape's parameters besides its key and the page (ITEM: `store_item`, split).
_SHAPE_PARAMS: dict[Shape, tuple[str, dict[str, str | int]]] = {
    Shape.SHOP: ("seller_id", {"sort": "-review_count"}),
    Shape.PRODUCT: ("jan_code", {"sort": "+price", "in_stock": "true"}),
    Shape.KEYWORD: ("query", {"sort": "+price", "in_stock": "true"}),
}


class YahooMarketplace:
    source = "yahoo"
    per_page = RESULTS_MAX
    # The last page whose first result is inside the window (it answers one result less).
    max_page = math.ceil((RESULTS_WINDOW - 1) / RESULTS_MAX)
    shapes = frozenset(Shape)
    shop_by_update = False

    def __init__(self) -> None:
        self.app_id: str = settings.YAHOO_APP_ID
        if not self.app_id:
            raise ImproperlyConfigured("YAHOO_APP_ID is not set")
        self.url: str = settings.YAHOO_API_URL
        self.timeout = (settings.YAHOO_CONNECT_TIMEOUT, settings.YAHOO_READ_TIMEOUT)
        self.max_wait: float = settings.YAHOO_MAX_WAIT_SECONDS
        self.per_product: int = settings.YAHOO_OFFERS_PER_PRODUCT
        self.budget = budget()
        self.limiter = self.budget.limiters[self.app_id]
        # What the rest of a batch answers without a request: the shared budget out of
        # reach, or a configuration fault (every request would get the same answer).
        self._stop: FetchError | None = None
        # Whether the last `_ask` sent a request (only those are counted).
        self._asked = False
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "Yasugoro price watch"

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        """One request per item code (`store_item`)."""
        return self._each(item_codes, self._item)

    def offers(self, jans: Iterable[str]) -> dict[str, OffersResult]:
        """One request per JAN code: every shop's offer, cheapest first."""
        return self._each(jans, self._offers)

    def pages(self, asks: Iterable[Ask]) -> dict[Ask, PageResult]:
        """One request per ask (`PageSearch.pages`)."""
        return self._each(asks, self._page)

    def shop_of(self, item_code: str) -> str | None:
        store, underscore, item = item_code.partition("_")
        return store if underscore and store and item else None

    def _each(self, keys: Iterable[_K], ask: Callable[[_K], _R]) -> dict[_K, _R | FetchError]:
        results: dict[_K, _R | FetchError] = {}
        self._stop = None
        try:
            for key in dict.fromkeys(keys):
                if self._stop is not None:
                    results[key] = self._stop
                    continue
                self._asked = False
                results[key] = ask(key)
                if self._asked:
                    count_marketplace_request(self.source, self.app_id, results[key])
        finally:
            self.session.close()
        return results

    def _item(self, code: str) -> FetchResult:
        store, _, item = code.partition("_")
        if not store or not item:
            detail = clip(f"{code}: not store_item", MAX_DETAIL)
            return FetchError(FetchKind.NOT_FOUND, detail, unasked=True)
        answer = self._ask({"seller_id": store, "query": item, "results": _ITEM_HITS})
        return answer if isinstance(answer, FetchError) else _read_item(code, answer)

    def _page(self, ask: Ask) -> PageResult:
        refused = unaskable(ask, self.shapes, self.max_page)
        if refused is not None:
            return refused
        start = (ask.page - 1) * RESULTS_MAX + 1
        window = {"start": start, "results": min(RESULTS_MAX, RESULTS_WINDOW - start)}
        if ask.shape == Shape.ITEM:
            store, item = self.shop_of(ask.key), ask.key.partition("_")[2]
            if store is None:
                detail = clip(f"{ask.key}: not store_item", MAX_DETAIL)
                return FetchError(FetchKind.NOT_FOUND, detail, unasked=True)
            params: dict[str, str | int] = {"seller_id": store, "query": item}
        else:
            name, extra = _SHAPE_PARAMS[ask.shape]
            params = {name: ask.key, **extra}
        answer = self._ask({**params, **window})
        return answer if isinstance(answer, FetchError) else _read_page(ask, answer)

    def _offers(self, jan: str) -> OffersResult:
        answer = self._ask({"jan_code": jan, "results": self.per_product, "sort": "+price"})
        return answer if isinstance(answer, FetchError) else _read_offers(jan, answer)

    def _ask(self, params: Mapping[str, str | int]) -> _Answer | FetchError:
        """One request through the rate limiter: the answer's JSON object and when it came,
        or what went wrong."""
        slot = take_slot(self.budget, self.max_wait)
        if isinstance(slot, FetchError):
            if slot.ours:  # no budget, no request: the rest of the batch is not asked
                self._stop = slot
            return slot
        self._asked = True
        try:
            response = self.session.get(
                self.url,
                params={"appid": self.app_id, **params},
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
        answer = self._classify(response.status_code, response.headers, body)
        if isinstance(answer, FetchError) and answer.kind == FetchKind.CONFIG:
            self._stop = answer
        return answer

    def _classify(
        self, status: int, headers: Mapping[str, str], body: bytes
    ) -> _Answer | FetchError:
        if status != 200:
            body = without_secrets(body, [self.app_id])
        try:
            data: Any = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        message = _error_message(data, body)
        said = clip(f"HTTP {status}" + (f" {message}" if message else ""), MAX_DETAIL)
        if status == 429:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            try:
                self.budget.hold_off(
                    self.app_id, retry_after if retry_after is not None else _DEFAULT_HOLD_OFF
                )
            except LimiterUnavailable:
                log.warning("could not record a 429 in the shared rate limiter")
            return FetchError(FetchKind.RATE_LIMITED, said, retry_after=retry_after)
        if status >= 500:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            return FetchError(FetchKind.SERVER, said, retry_after=retry_after)
        if status in (401, 403) or (status == 400 and "Authentication" in message):
            fix = (
                "Yahoo! Shopping refused the application id: set YAHOO_APP_ID to the Client "
                "ID of an application registered on Yahoo! JAPAN's developer site"
            )
            if status == 403:
                # The same 403 for an id past its 50,000 requests of the day: both are named,
                # and the probe lifts the halt after midnight if that was the cause.
                fix += ", or wait for midnight (Japan time) if its 50,000 requests a day are spent"
            return FetchError(
                FetchKind.CONFIG, clip(f"{fix} (Yahoo said {said})", MAX_CONFIG_DETAIL)
            )
        if status == 404:
            return FetchError(FetchKind.NOT_FOUND, said)
        if status != 200:
            return FetchError(FetchKind.BAD_RESPONSE, said)
        if not isinstance(data, dict):
            return FetchError(FetchKind.BAD_RESPONSE, "the answer is not a JSON object")
        return data, timezone.now()


def budget() -> Budget:
    """The requests Yahoo! Shopping allows us: the application id at `YAHOO_RATE_PER_SECOND`."""
    return Budget(
        {
            settings.YAHOO_APP_ID: limiter_for(
                "yahoo", settings.YAHOO_APP_ID, settings.YAHOO_RATE_PER_SECOND
            )
        }
    )


def _error_message(data: Any, body: bytes) -> str:
    """Yahoo's error message in a few words: `{"Error": {"Message": "…"}}`, or the gateway's
    `<Error><Message>…</Message></Error>`; '' when the body has none."""
    error = data.get("Error") if isinstance(data, dict) else None
    message = error.get("Message") if isinstance(error, dict) else None
    if data is None:
        found = re.search(rb"<Message>(.*?)</Message>", body[:2000], re.DOTALL)
        message = found.group(1).decode("utf-8", "replace") if found else None
    return clip(" ".join(message.split()), 120) if isinstance(message, str) else ""


def _read_item(code: str, answer: _Answer) -> FetchResult:
    data, now = answer
    try:
        hits = field(data, "hits", list)
        for hit in hits:
            if not isinstance(hit, dict):
                raise Malformed("hits must be objects")
            if hit.get("code") == code:
                return parse_hit(hit, now)
    except Malformed as exc:
        return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), MAX_DETAIL))
    return FetchError(FetchKind.EMPTY, f"no offer for {code}")


def _read_offers(jan: str, answer: _Answer) -> OffersResult:
    data, now = answer
    try:
        hits = field(data, "hits", list)
        total = optional(data, "totalResultsAvailable", int)
        if not all(isinstance(hit, dict) for hit in hits):
            raise Malformed("hits must be objects")
        read, unread = each_readable(hits, lambda hit: parse_hit(hit, now))
        offers: dict[str, Observation] = {}
        for offer in read:
            # A search by JAN answers that JAN; a hit that names another is not this product.
            if offer.extra.get("jan") in (None, jan):
                offers.setdefault(offer.item_code, offer)
    except Malformed as exc:
        return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), MAX_DETAIL))
    if not offers:
        return FetchError(FetchKind.EMPTY, f"no offer for JAN {jan}")
    # An offer left unread is not gone: it may be in stock.
    complete = not unread and (total is None or total <= len(hits))
    return Offers(jan=jan, offers=tuple(offers.values()), observed_at=now, complete=complete)


def _read_page(ask: Ask, answer: _Answer) -> PageResult:
    """Every hit of one page of an answer, in its order."""
    data, now = answer
    try:
        hits = field(data, "hits", list)
        if not all(isinstance(hit, dict) for hit in hits):
            raise Malformed("hits must be objects")
        items, unread = each_readable(hits, lambda hit: parse_hit(hit, now))
        total = optional(data, "totalResultsAvailable", int)
    except Malformed as exc:
        return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), MAX_DETAIL))
    last = None
    if total is not None:
        reachable = min(total, RESULTS_WINDOW - 1)
        last = max(1, min(math.ceil(reachable / RESULTS_MAX), YahooMarketplace.max_page))
    return Page(
        ask=ask, items=tuple(items), observed_at=now, total=total, last_page=last, unread=unread
    )


def parse_hit(hit: Mapping[str, Any], now: dt.datetime) -> Observation:
    """One hit of an itemSearch v3 answer. Raises Malformed."""
    code = field(hit, "code", str)
    price = field(hit, "price", int)
    if price < 0:
        raise Malformed("price is negative")
    in_stock = field(hit, "inStock", bool)
    name = field(hit, "name", str)
    shipping = optional(hit, "shipping", dict) or {}
    image = optional(hit, "image", dict) or {}
    seller = optional(hit, "seller", dict) or {}
    extra: dict[str, object] = {"shop": (optional(seller, "sellerId", str) or "")[:200]}
    if jan := optional(hit, "janCode", str):
        extra["jan"] = jan
    points, rate, member_points = read_points(optional(hit, "point", dict) or {})
    return Observation(
        item_code=code[:200],
        price=price,
        shipping=0 if optional(shipping, "code", int) == _FREE_SHIPPING else None,
        in_stock=in_stock,
        observed_at=now,
        name=name[:500],
        url=safe_url(optional(hit, "url", str)),
        image_url=safe_url(optional(image, "medium", str)),
        shop_name=(optional(seller, "name", str) or "")[:200],
        extra=extra,
        points=points,
        point_rate=rate,
        member_points=member_points,
    )


# `point`'s figures (docs/marketplaces.md, "Points"): those every shopper gets, and those
# only premium members (LYP premium) get. Each is a whole number of points; absent is 0.
_EVERYONE = ("amount", "bonusAmount", "lyLimitedBonusAmount")
_EVERYONE_TIMES = ("times", "bonusTimes", "lyLimitedBonusTimes")
_MEMBERS = ("premiumAmount", "premiumBonusAmount", "lyLimitedPremiumBonusAmount")


def read_points(point: Mapping[str, Any]) -> tuple[int, int | None, int]:
    """(points everyone gets, their multiplier when above the standard, what premium members
    get on top) of a hit's `point` object. A member's figures are taken for what such a
    member gets in all — so on top of everyone's only what exceeds it —, the smaller of the
    two readings the documentation leaves open. Raises Malformed."""
    figures: dict[str, int] = {}
    for key in (*_EVERYONE, *_EVERYONE_TIMES, *_MEMBERS):
        try:
            value = optional(point, key, int)
        except Malformed as exc:
            raise Malformed(f"point.{exc}") from None
        if value is not None and value < 0:
            raise Malformed(f"point.{key} must not be negative, got {value}")
        figures[key] = value or 0
    everyone = sum(figures[key] for key in _EVERYONE)
    times = sum(figures[key] for key in _EVERYONE_TIMES)
    members = sum(figures[key] for key in _MEMBERS)
    return everyone, times if times > 1 else None, max(members - everyone, 0)
