"""A fake Rakuten Ichiba Item Search API: a real HTTP server on 127.0.0.1, in a thread.

It checks what the real service checks (docs/marketplaces.md) and answers its error bodies:

- the path: `/ichibams/api/IchibaItem/Search/<version>` with a version it knows (`versions`);
  another version → 400 `wrong_parameter` "API Configuration not found";
- the access key, in the `accessKey` header or query parameter: none → 400 "accessKey must be
  present…"; an application id it does not know → 400 `wrong_parameter` "specify valid
  applicationId"; a key that is not the id's → 403 "Invalid Access Key";
- a web-application registration (`sites` set): `Origin`/`Referer` missing → 403
  REQUEST_CONTEXT_BODY_HTTP_REFERRER_MISSING, another site → 403 HTTP_REFERRER_NOT_ALLOWED; a
  backend registration with an IP allow-list (`allowed_ips` set) → 403 CLIENT_IP_NOT_ALLOWED;
- `formatVersion=2`; `hits` 1–30, `page` 1–100, `sort` and `availability` as documented (a
  value out of range → 400 `wrong_parameter`); at least one of `itemCode`, `shopCode`,
  `keyword`.

It answers from a catalogue (`add`, `set`, `campaign`): items with a shop, an optional JAN
code, a price, points (`pointRate` 1 and no window unless a campaign is set, `taxFlag` 0),
stock and an update stamp that moves on every price or stock change (`set`, `touch`), in the
documented `formatVersion=2` shape — by `itemCode`, by `shopCode` (with
`sort=-updateTimestamp`: most recently updated first), by `keyword` (every word in the item's
name or its JAN code; `sort=+itemPrice`: cheapest first) — paged as asked. Like the real one,
an answer carries no update time.

It misbehaves on demand per key (`behave[itemCode | shopCode | keyword] = "…"`):

    rate_limited    429 {"error": "too_many_requests"} with Retry-After (`retry_after`)
    server          500 {"error": "system_error"}
    unavailable     503 {"error": "service_unavailable"}
    stall           waits (past any sane read timeout) before answering
    malformed       200 with a body that is not JSON
    missing_fields  200 with the items lacking itemPrice
    wrong_types     200 with itemPrice a string that is no number ("1,280円")
    string_price    200 with itemPrice a string of digits ("1280"), as seen on the new host
    empty           200 with count 0 and no items
    not_found       404 {"error": "not_found"}
    wrong_parameter 400 {"error": "wrong_parameter"}
    unauthorized    401 in the gateway's shape
    echoing_gateway 403 an HTML page that names the request it refused, its query string
                    (application id included) in its first words, as a WAF's may

With `fail_at_random(rate, seed)` it also misbehaves at random, whatever the key: `rate` of
the requests get one of FAULTS — 429 with a Retry-After, 500, a stall past the read timeout, a
connection reset, or a malformed body.

Every request is recorded (`requests`, `received`) so tests can see what was asked, how
often and with which headers, and its arrival time per application id (`arrivals`). With
`per_second` set it also enforces the real API's limit as the real one counts it: a request
beyond `per_second` of its application id in one wall-clock second is answered 429
(`too_many` counts them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter

from tests.fakes.server import Answer, FakeAPI, Received

APP_ID = "test-app-id"
ACCESS_KEY = "pk_test-access-key"
BASE_PATH = "/ichibams/api/IchibaItem/Search"
VERSIONS = ("20260401", "20260701")
FAULTS = ("rate_limited", "server", "stall", "reset", "malformed")
HITS_MAX = 30
PAGE_MAX = 100
SORTS = {
    "standard",
    *(f"{sign}{key}" for sign in "+-" for key in ("affiliateRate", "reviewCount")),
    *(f"{sign}{key}" for sign in "+-" for key in ("reviewAverage", "itemPrice")),
    "+updateTimestamp",
    "-updateTimestamp",
}


def key_for(app_id: str) -> str:
    """The access key the fake gives application `app_id` (`accept`)."""
    return f"pk_test-{app_id}"


def ichiba_item(code: str, *, price: int = 1000, available: bool = True, **overrides) -> dict:
    """One item as `formatVersion=2` returns it (a realistic subset of the fields)."""
    shop, _, item = code.partition(":")
    return {
        "itemName": f"テスト商品 {item}",
        "catchcopy": "",
        "itemCode": code,
        "itemPrice": price,
        "itemCaption": "",
        "itemUrl": f"https://item.rakuten.co.jp/{shop}/{item}/",
        "shopUrl": f"https://www.rakuten.co.jp/{shop}/",
        "smallImageUrls": [
            f"https://thumbnail.image.rakuten.co.jp/@0_mall/{shop}/{item}.jpg?_ex=64x64"
        ],
        "mediumImageUrls": [
            f"https://thumbnail.image.rakuten.co.jp/@0_mall/{shop}/{item}.jpg?_ex=128x128"
        ],
        "availability": 1 if available else 0,
        "taxFlag": 0,
        "postageFlag": 0,
        "creditCardFlag": 1,
        "reviewCount": 12,
        "reviewAverage": 4.5,
        "pointRate": 1,
        "pointRateStartTime": "",
        "pointRateEndTime": "",
        "startTime": "",
        "endTime": "",
        "shopName": f"ショップ {shop}",
        "shopCode": shop,
        "genreId": "100000",
        **overrides,
    }


class FakeIchiba(FakeAPI):
    def __init__(self) -> None:
        super().__init__(BASE_PATH)
        self.items: dict[str, dict] = {}  # item code -> the item as answered
        self.jans: dict[str, str] = {}  # item code -> its JAN code, when it has one
        self.stamps: dict[str, int] = {}  # item code -> its update stamp (higher: later)
        self._stamp = 0
        self.behave: dict[str, str] = {}
        self.retry_after: str | None = "120"
        self.versions = set(VERSIONS)
        self.applications = {APP_ID: ACCESS_KEY}  # the ids it accepts, each with its key
        self.sites: set[str] | None = None  # a web application's registered origins
        self.allowed_ips: set[str] | None = None  # a backend application's allow-list
        self.fault_rate = 0.0
        self.faults: Counter[str] = Counter()
        self._random = random.Random(0)

    # --- the catalogue ---------------------------------------------------------------------

    def add(self, code: str, *, jan: str = "", **kwargs) -> dict:
        with self.lock:
            self.items[code] = ichiba_item(code, **kwargs)
            if jan:
                self.jans[code] = jan
            self._touch(code)
            return self.items[code]

    def set(
        self, code: str, /, *, price: int | None = None, available: bool | None = None, **changes
    ) -> None:
        """Change an item as its shop would: a new price or stock moves its update stamp."""
        with self.lock:
            item = self.items[code]
            moved = False
            if price is not None and price != item["itemPrice"]:
                item["itemPrice"], moved = price, True
            if available is not None and int(available) != item["availability"]:
                item["availability"], moved = int(available), True
            item.update(changes)
            if moved or changes:
                self._touch(code)

    def campaign(self, code: str, rate: object, start: object = "", end: object = "") -> None:
        """A points campaign on an item, as the shop sets it: `pointRate` and its window
        (`pointRateStartTime`/`EndTime`: "YYYY-MM-DD HH:MM", Japan time; "" for none). Any
        value is answered as given, a malformed one included."""
        self.set(code, pointRate=rate, pointRateStartTime=start, pointRateEndTime=end)

    def touch(self, code: str) -> None:
        """Another edit of the item (its text, its pictures): its update stamp moves."""
        with self.lock:
            self._touch(code)

    def _touch(self, code: str) -> None:
        self._stamp += 1
        self.stamps[code] = self._stamp

    def accept(self, *app_ids: str) -> dict[str, str]:
        """Accept exactly these application ids, each with its key (`key_for`)."""
        with self.lock:
            self.applications = {app_id: key_for(app_id) for app_id in app_ids}
            return dict(self.applications)

    # --- what was asked --------------------------------------------------------------------

    def asked(self, code: str) -> int:
        return sum(1 for query in self.requests if query.get("itemCode") == code)

    def fail_at_random(self, rate: float, seed: int, *, retry_after: str = "1") -> None:
        """From now on, fail `rate` of the requests, each with one of FAULTS at random."""
        with self.lock:
            self.fault_rate, self._random = rate, random.Random(seed)
            self.retry_after = retry_after

    def arrived(self, request: Received) -> Received | None:
        if self.over_allowance(request.query.get("applicationId", "")):
            return dataclasses.replace(request, fault="rate_limited")
        fault = self._pick_fault()
        if fault == "reset":
            return None
        return dataclasses.replace(request, fault=fault) if fault else request

    def _pick_fault(self) -> str:
        if not self.fault_rate or self._random.random() >= self.fault_rate:
            return ""
        fault = self._random.choice(FAULTS)
        self.faults[fault] += 1
        return fault

    # --- the answer ------------------------------------------------------------------------

    def answer(self, request: Received) -> Answer:
        refused = self._refused(request)
        if refused is not None:
            return refused
        query = request.query
        key = query.get("itemCode") or query.get("shopCode") or query.get("keyword") or ""
        behaviour = request.fault or self.behave.get(key, "")
        if behaviour == "rate_limited":
            status, headers, body = _json(
                429,
                {
                    "error": "too_many_requests",
                    "error_description": "number of allowed requests has been exceeded "
                    "for this API. please try again soon.",
                },
            )
            if self.retry_after is not None:
                headers["Retry-After"] = self.retry_after
            return status, headers, body
        if behaviour == "server":
            return _json(500, {"error": "system_error", "error_description": "api logic error"})
        if behaviour == "unavailable":
            return _json(503, {"error": "service_unavailable", "error_description": "maintenance"})
        if behaviour == "stall":
            self.stall()
            return None
        if behaviour == "malformed":
            return 200, {"Content-Type": "application/json"}, b'{"count": 1, "Items": [{"itemCo'
        if behaviour == "not_found":
            return _json(404, {"error": "not_found", "error_description": "not found"})
        if behaviour == "wrong_parameter":
            return _wrong_parameter("itemCode is not valid")
        if behaviour == "unauthorized":
            return _json(401, {"errors": {"errorCode": 401, "errorMessage": "Unauthorized"}})
        if behaviour == "echoing_gateway":
            asked = "&".join(f"{name}={value}" for name, value in query.items())
            refusal = f"<html><body>Access Denied: {request.path}?{asked}</body></html>"
            return 403, {"Content-Type": "text/html"}, refusal.encode()
        hits, page = int(query.get("hits", HITS_MAX)), int(query.get("page", 1))
        with self.lock:
            found = self._search(query)
            total = len(found)
            items = [dict(self.items[code]) for code in found[(page - 1) * hits : page * hits]]
        if behaviour == "empty":
            items, total = [], 0
        if behaviour == "missing_fields":
            items = [{k: v for k, v in item.items() if k != "itemPrice"} for item in items]
        if behaviour == "wrong_types":
            items = [{**item, "itemPrice": f"{item['itemPrice']:,}円"} for item in items]
        if behaviour == "string_price":
            items = [{**item, "itemPrice": str(item["itemPrice"])} for item in items]
        return _json(200, _page(items, total, page, hits))

    def _refused(self, request: Received) -> Answer:
        """The real service's refusals, in the order it checks (path, key, registration,
        parameters); None when the request may be answered."""
        path, query = request.path, request.query
        version = path.removeprefix(BASE_PATH + "/")
        if not path.startswith(BASE_PATH + "/") or version not in self.versions:
            return _wrong_parameter("API Configuration not found")
        key = request.header("accessKey") or query.get("accessKey")
        if not key:
            message = "accessKey must be present as a query parameter or in the header"
            return _json(400, {"errors": {"errorCode": 400, "errorMessage": message}})
        app_id = query.get("applicationId", "")
        if app_id not in self.applications:
            return _wrong_parameter("specify valid applicationId")
        if key != self.applications[app_id]:
            return _json(403, {"errors": {"errorCode": 403, "errorMessage": "Invalid Access Key"}})
        if self.sites is not None:
            origin = request.header("Origin")
            referer = request.header("Referer")
            if not origin and not referer:
                return _forbidden("REQUEST_CONTEXT_BODY_HTTP_REFERRER_MISSING")
            sent = origin or _origin_of(referer or "")
            if sent not in self.sites:
                return _forbidden("HTTP_REFERRER_NOT_ALLOWED")
        if self.allowed_ips is not None and request.client not in self.allowed_ips:
            return _forbidden("CLIENT_IP_NOT_ALLOWED")
        if query.get("formatVersion") != "2":
            return _wrong_parameter("formatVersion is not valid")
        for name, low, high in (("hits", 1, HITS_MAX), ("page", 1, PAGE_MAX)):
            value = query.get(name, str(low))
            if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
                return _wrong_parameter(f"{name} is not valid")
        if query.get("sort", "standard") not in SORTS:
            return _wrong_parameter("sort is not valid")
        if query.get("availability", "1") not in ("0", "1"):
            return _wrong_parameter("availability is not valid")
        if not any(query.get(name) for name in ("itemCode", "shopCode", "keyword")):
            return _wrong_parameter("keyword, genreId, itemCode or shopCode is not valid")
        return None

    def _search(self, query: dict[str, str]) -> list[str]:
        """The codes of the items the query finds, in the order its sort asks."""
        codes = list(self.items)
        if query.get("itemCode"):
            codes = [code for code in codes if code == query["itemCode"]]
        if query.get("shopCode"):
            codes = [c for c in codes if self.items[c].get("shopCode") == query["shopCode"]]
        if query.get("keyword"):
            words = query["keyword"].split()
            codes = [c for c in codes if all(w in self._text(c) for w in words)]
        if query.get("availability", "1") == "1":
            codes = [code for code in codes if self.items[code].get("availability") == 1]
        sort = query.get("sort", "standard")
        if sort.endswith("itemPrice"):
            codes.sort(key=lambda c: _number(self.items[c].get("itemPrice")))
        elif sort.endswith("updateTimestamp"):
            codes.sort(key=lambda c: self.stamps.get(c, 0))
        if sort.startswith("-"):
            codes.reverse()
        return codes

    def _text(self, code: str) -> str:
        item = self.items[code]
        return f"{item.get('itemName', '')} {item.get('itemCaption', '')} {self.jans.get(code, '')}"


def _number(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:
        return math.inf


def _origin_of(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if rest else ""


def _page(items: list[dict], total: int, page: int, hits: int) -> dict:
    first = (page - 1) * hits + 1 if items else 0
    return {
        "count": total,
        "page": page,
        "first": first,
        "last": first + len(items) - 1 if items else 0,
        "hits": len(items),
        "carrier": 0,
        "pageCount": min(PAGE_MAX, math.ceil(total / hits)),
        "Items": items,
        "GenreInformation": [],
        "TagInformation": [],
    }


def _wrong_parameter(description: str) -> tuple[int, dict[str, str], bytes]:
    return _json(400, {"error": "wrong_parameter", "error_description": description})


def _forbidden(message: str) -> tuple[int, dict[str, str], bytes]:
    return _json(403, {"errors": {"errorCode": 403, "errorMessage": message}})


def _json(status: int, data: dict) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps(data, ensure_ascii=False).encode()
    return status, {"Content-Type": "application/json;charset=UTF-8"}, body
