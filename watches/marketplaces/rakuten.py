"""Rakuten Ichiba, through its Item Search API (one item code per request).

We ask with `formatVersion=2` (items come flattened in `Items[]`) and `availability=0` (sold-out
items are answered too, with `availability: 0`, so an out-of-stock item keeps its name and
price). Every outcome becomes an Observation or a FetchError kind:

- an item with `availability: 1` → Observation in stock; `availability: 0` → Observation out
  of stock (the dispatcher drops it `out_of_stock`, exactly as for `empty`);
- `count: 0` / no items → `empty`: the search has no offer for the code right now;
- HTTP 404 or `error: not_found` → `not_found`;
- HTTP 429 or `error: too_many_requests` → `rate_limited`, with the server's `Retry-After`;
- HTTP 5xx → `server`; a timeout or a refused/broken connection → `network`;
- malformed JSON, missing fields, wrong types, another 4xx → `bad_response`.

Requests go through one `requests.Session` per adapter and the budget of the application ids
(`watches.marketplaces.ratelimit`): shared by every caller in the fleet with `REDIS_URL`, in the
process without. With several ids (`RAKUTEN_APP_IDS`) their allowances add up: each request
goes out under the id whose slot comes soonest, and a 429 holds off (and slows) that id only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from common.counters import count_marketplace_request
from common.retry_after import parse_retry_after
from common.text import clip
from watches.marketplaces.answers import MAX_DETAIL as _MAX_DETAIL
from watches.marketplaces.answers import Malformed as _Malformed
from watches.marketplaces.answers import field as _field
from watches.marketplaces.answers import optional as _optional
from watches.marketplaces.answers import request_failed as _detail
from watches.marketplaces.answers import safe_url as _safe_url
from watches.marketplaces.base import FetchError, FetchKind, FetchResult, Observation
from watches.marketplaces.ratelimit import Budget, LimiterUnavailable, limiter_for

log = logging.getLogger("watches.marketplaces.rakuten")

# When the server says "too many requests" without saying for how long.
_DEFAULT_HOLD_OFF = 5.0


class RakutenMarketplace:
    source = "rakuten"

    def __init__(self) -> None:
        self.app_ids: list[str] = app_ids()
        if not self.app_ids:
            raise ImproperlyConfigured("RAKUTEN_APP_ID is not set")
        self.url: str = settings.RAKUTEN_API_URL
        self.timeout = (settings.RAKUTEN_CONNECT_TIMEOUT, settings.RAKUTEN_READ_TIMEOUT)
        self.max_wait: float = settings.RAKUTEN_MAX_WAIT_SECONDS
        self.budget = budget()
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "Yasugoro price watch"

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        codes = list(dict.fromkeys(item_codes))
        results: dict[str, FetchResult] = {}
        try:
            unavailable: FetchError | None = None
            for code in codes:
                if unavailable is not None:
                    results[code] = unavailable
                    continue
                try:
                    slot = self.budget.acquire(max_wait=self.max_wait)
                    wait = None if slot is not None else self.budget.wait_needed()
                except LimiterUnavailable as exc:
                    # No budget, no request: the fleet's allowance is unknown. The rest of
                    # the batch is not asked either (each try could wait out a timeout).
                    results[code] = unavailable = FetchError(
                        FetchKind.RATE_LIMITED, str(exc), ours=True
                    )
                    continue
                if slot is None:
                    # Held off (a 429) for longer than a caller should block: the rest of
                    # the batch is rate limited without asking.
                    results[code] = FetchError(
                        FetchKind.RATE_LIMITED, "waiting out the rate limit", retry_after=wait
                    )
                    continue
                results[code] = self._fetch_one(code, slot.app_id)
                count_marketplace_request(self.source, slot.app_id, results[code])
        finally:
            self.session.close()
        return results

    def _fetch_one(self, code: str, app_id: str) -> FetchResult:
        params = {
            "applicationId": app_id,
            "itemCode": code,
            "formatVersion": 2,
            "availability": 0,
            "format": "json",
        }
        try:
            response = self.session.get(
                self.url, params=params, timeout=self.timeout, allow_redirects=False
            )
            body = response.content
        except requests.Timeout as exc:
            return FetchError(FetchKind.NETWORK, _detail("timeout", exc))
        except requests.ConnectionError as exc:
            return FetchError(FetchKind.NETWORK, _detail("connection failed", exc))
        except requests.RequestException as exc:
            return FetchError(FetchKind.NETWORK, _detail("request failed", exc))
        return self._classify(code, app_id, response.status_code, response.headers, body)

    def _classify(
        self, code: str, app_id: str, status: int, headers: Mapping[str, str], body: bytes
    ) -> FetchResult:
        try:
            data: Any = json.loads(body)
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        description = data.get("error_description", "") if isinstance(data, dict) else ""
        said = f"HTTP {status}" + (f" {error}: {description}" if error else "")

        if status == 429 or error == "too_many_requests":
            retry_after = parse_retry_after(headers.get("Retry-After"))
            hold = retry_after if retry_after is not None else _DEFAULT_HOLD_OFF
            try:
                self.budget.hold_off(app_id, hold)
            except LimiterUnavailable:
                log.warning("could not record a 429 in the shared rate limiter")
            return FetchError(
                FetchKind.RATE_LIMITED, clip(said, _MAX_DETAIL), retry_after=retry_after
            )
        if status >= 500:
            retry_after = parse_retry_after(headers.get("Retry-After"))
            return FetchError(FetchKind.SERVER, clip(said, _MAX_DETAIL), retry_after=retry_after)
        if status == 404 or error == "not_found":
            return FetchError(FetchKind.NOT_FOUND, clip(f"{code}: {said}", _MAX_DETAIL))
        if status != 200 or error is not None:
            # 400 wrong_parameter is also what a bad application id gets: retried and shown
            # to staff, never taken as "this item does not exist".
            return FetchError(FetchKind.BAD_RESPONSE, clip(said, _MAX_DETAIL))
        if not isinstance(data, dict):
            return FetchError(FetchKind.BAD_RESPONSE, "the answer is not a JSON object")
        try:
            return parse_item(code, data, timezone.now())
        except _Malformed as exc:
            return FetchError(FetchKind.BAD_RESPONSE, clip(str(exc), _MAX_DETAIL))


def app_ids() -> list[str]:
    """The configured application ids: `RAKUTEN_APP_IDS`, else `RAKUTEN_APP_ID`."""
    ids = settings.RAKUTEN_APP_IDS or [settings.RAKUTEN_APP_ID]
    return [app_id for app_id in dict.fromkeys(ids) if app_id]


def budget() -> Budget:
    """The requests Rakuten allows us: every application id at `RAKUTEN_RATE_PER_SECOND`."""
    rate = settings.RAKUTEN_RATE_PER_SECOND
    return Budget({app_id: limiter_for("rakuten", app_id, rate) for app_id in app_ids()})


def parse_item(code: str, data: Mapping[str, Any], now: dt.datetime) -> FetchResult:
    """Read a `formatVersion=2` answer for one item code. Raises _Malformed."""
    count = _field(data, "count", int)
    items = _field(data, "Items", list)
    if count == 0 or not items:
        return FetchError(FetchKind.EMPTY, f"no offer for {code}")
    matches = [item for item in items if isinstance(item, dict) and item.get("itemCode") == code]
    if not matches:
        if not all(isinstance(item, dict) for item in items):
            raise _Malformed("Items must be objects (formatVersion=2)")
        raise _Malformed(f"the answer is about another item, not {code}")
    item = matches[0]
    price = _field(item, "itemPrice", int)
    if price < 0:
        raise _Malformed("itemPrice is negative")
    availability = _field(item, "availability", int)
    if availability not in (0, 1):
        raise _Malformed(f"availability must be 0 or 1, got {availability}")
    name = _field(item, "itemName", str)
    postage = _optional(item, "postageFlag", int)
    images = _optional(item, "mediumImageUrls", list) or []
    if not all(isinstance(url, str) for url in images):
        raise _Malformed("mediumImageUrls must be a list of strings (formatVersion=2)")
    return Observation(
        item_code=code,
        price=price,
        # postageFlag 0: shipping included; 1: shipping extra, amount not in the API.
        shipping=0 if postage == 0 else None,
        in_stock=availability == 1,
        observed_at=now,
        name=name[:500],
        url=_safe_url(_optional(item, "itemUrl", str)),
        image_url=_safe_url(images[0] if images else None),
        shop_name=(_optional(item, "shopName", str) or "")[:200],
    )
