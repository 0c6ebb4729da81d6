"""A fake Rakuten Ichiba Item Search API: a real HTTP server on 127.0.0.1, in a thread.

It answers `GET /?applicationId=…&itemCode=…&formatVersion=2…` in the documented JSON shape
(`formatVersion=2`: items flattened in `Items[]`) for the items a test puts in `items`, and
misbehaves on demand per item code (`behave[code] = "…"`):

    rate_limited    429 {"error": "too_many_requests"} with Retry-After (`retry_after`)
    server          500 {"error": "system_error"}
    unavailable     503 {"error": "service_unavailable"}
    stall           waits (past any sane read timeout) before answering
    malformed       200 with a body that is not JSON
    missing_fields  200 with the item lacking itemPrice
    wrong_types     200 with itemPrice as a string
    empty           200 with count 0 and no items
    not_found       404 {"error": "not_found"}
    wrong_parameter 400 {"error": "wrong_parameter"}

With `fail_at_random(rate, seed)` it also misbehaves at random, whatever the item: `rate` of
the requests get one of FAULTS — 429 with a Retry-After, 500, a stall past the read timeout, a
connection reset, or a malformed body.

Every request is recorded (`requests`) so tests can see what was asked, and how often, and
its arrival time per application id (`arrivals`). With `per_second` set it also enforces the
real API's limit as the real one counts it: a request beyond `per_second` of its application
id in one wall-clock second is answered 429 (`too_many` counts them).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict

from tests.fakes.server import Answer, FakeAPI

APP_ID = "test-app-id"
FAULTS = ("rate_limited", "server", "stall", "reset", "malformed")


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
        "shopName": f"ショップ {shop}",
        "shopCode": shop,
        "genreId": "100000",
        **overrides,
    }


class FakeIchiba(FakeAPI):
    def __init__(self) -> None:
        super().__init__("/services/api/IchibaItem/Search/20220601")
        self.items: dict[str, dict] = {}
        self.behave: dict[str, str] = {}
        self.retry_after = "120"
        self.app_ids = {APP_ID}  # the application ids it accepts
        self.fault_rate = 0.0
        self.faults: Counter[str] = Counter()
        self._random = random.Random(0)
        self.arrivals: dict[str, list[float]] = defaultdict(list)  # app id -> time.time()s
        self.per_second: int | None = None
        self.too_many = 0
        self._seconds: Counter[tuple[str, int]] = Counter()

    def arrived(self, query: dict[str, str]) -> dict[str, str] | None:
        app_id = query.get("applicationId", "")
        at = time.time()
        self.arrivals[app_id].append(at)
        self._seconds[app_id, int(at)] += 1
        if self.per_second is not None and self._seconds[app_id, int(at)] > self.per_second:
            self.too_many += 1
            return {**query, "_fault": "rate_limited"}
        fault = self._pick_fault()
        if fault == "reset":
            return None
        return {**query, "_fault": fault} if fault else query

    def max_per_second(self) -> dict[str, int]:
        """The most requests any one wall-clock second saw, per application id."""
        with self.lock:
            most: dict[str, int] = {}
            for (app_id, _), count in self._seconds.items():
                most[app_id] = max(most.get(app_id, 0), count)
            return most

    def fail_at_random(self, rate: float, seed: int, *, retry_after: str = "1") -> None:
        """From now on, fail `rate` of the requests, each with one of FAULTS at random."""
        with self.lock:
            self.fault_rate, self._random = rate, random.Random(seed)
            self.retry_after = retry_after

    def _pick_fault(self) -> str:
        if not self.fault_rate or self._random.random() >= self.fault_rate:
            return ""
        fault = self._random.choice(FAULTS)
        self.faults[fault] += 1
        return fault

    def add(self, code: str, **kwargs) -> dict:
        self.items[code] = ichiba_item(code, **kwargs)
        return self.items[code]

    def asked(self, code: str) -> int:
        return sum(1 for query in self.requests if query.get("itemCode") == code)

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        if query.get("applicationId") not in self.app_ids:
            return _json(
                400,
                {"error": "wrong_parameter", "error_description": "specify valid applicationId"},
            )
        if query.get("formatVersion") != "2":
            return _json(400, {"error": "wrong_parameter", "error_description": "formatVersion"})
        code = query.get("itemCode", "")
        behaviour = query.get("_fault") or self.behave.get(code, "")
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
            return self.stall()
        if behaviour == "malformed":
            return 200, {"Content-Type": "application/json"}, b'{"count": 1, "Items": [{"itemCo'
        if behaviour == "not_found":
            return _json(404, {"error": "not_found", "error_description": "not found"})
        if behaviour == "wrong_parameter":
            return _json(
                400, {"error": "wrong_parameter", "error_description": "itemCode is not valid"}
            )
        item = self.items.get(code)
        if behaviour == "empty" or item is None:
            return _json(200, _page([]))
        if behaviour == "missing_fields":
            item = {k: v for k, v in item.items() if k != "itemPrice"}
        if behaviour == "wrong_types":
            item = {**item, "itemPrice": str(item["itemPrice"])}
        return _json(200, _page([item]))


def _page(items: list[dict]) -> dict:
    return {
        "count": len(items),
        "page": 1,
        "first": 1 if items else 0,
        "last": len(items),
        "hits": len(items),
        "carrier": 0,
        "pageCount": 1 if items else 0,
        "Items": items,
        "GenreInformation": [],
        "TagInformation": [],
    }


def _json(status: int, data: dict) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps(data, ensure_ascii=False).encode()
    return status, {"Content-Type": "application/json;charset=UTF-8"}, body
