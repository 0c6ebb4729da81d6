"""A fake Yahoo! Shopping Item Search API v3: a real HTTP server on 127.0.0.1, in a thread.

It answers `GET /ShoppingWebService/V3/itemSearch?appid=…` in the documented JSON shape
(`totalResultsAvailable`, `totalResultsReturned`, `firstResultsPosition`, `request`,
`hits[]`) from a catalogue (`add`, `set`, `points`): items with a store, an optional JAN
code, a price, a `point` object (1 % as `amount` unless set otherwise),
stock, a review count and an update stamp that moves on every price or stock change. It finds
by `jan_code`, by `seller_id`, by `query` (every word in the item's name or code), each
narrowed by `in_stock` when given, in the order `sort` asks (`-score`, the default: as added;
`+price`, `-price`, `-review_count`), paged by `start` and `results`.

It checks what the real service checks (docs/marketplaces.md) and answers its error bodies:
no `appid` → 400, an `appid` it does not know → 403 (Yahoo's gateway answers both in XML);
`results` above RESULTS_MAX, `start + results` above 1000, an undocumented `sort` → 400.

It misbehaves on demand per JAN code, seller, query or `store_item` code (`behave[key]`):

    rate_limited    429 with Retry-After (`retry_after`; None sends none)
    server          500 {"Error": {"Message": …}}
    maintenance     503 with the XML body Yahoo documents for maintenance (not JSON)
    stall           waits (past any sane read timeout) before answering
    malformed       200 with a body that is not JSON
    missing_fields  200 with the hits lacking `price`
    wrong_types     200 with `price` as a string
    empty           200 with no hits
    loose           200 with every item, whatever its JAN code (as a keyword search answers)
    not_found       404
    bad_appid       403 {"Error": {"Message": "Invalid appid"}} (the JSON form)
    echoing_gateway 502 the XML error form, its message naming the request (appid included)

Every request is recorded (`requests`, `received`) so tests can count what was asked, and how
often; with `per_second` set it refuses (429) what goes over the allowance of an appid in one
wall-clock second, as the real one counts it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import zoneinfo

from tests.fakes.server import Answer, FakeAPI, Received

JAPAN = zoneinfo.ZoneInfo("Asia/Tokyo")

APP_ID = "test-yahoo-app-id"
PATH = "/ShoppingWebService/V3/itemSearch"
RESULTS_MAX = 50
RESULTS_WINDOW = 1000  # start + results may not go past it
SORTS = ("-score", "+price", "-price", "-review_count")
# shipping.code as the API documents it.
SHIPPING = {1: "設定なし", 2: "送料無料", 3: "条件付き送料無料"}


def yahoo_hit(
    code: str,
    *,
    jan: str = "",
    price: int = 500,
    in_stock: bool = True,
    shipping: int = 2,
    reviews: int = 12,
    **overrides,
) -> dict:
    """One hit as itemSearch v3 returns it (a realistic subset of its fields)."""
    store, _, item = code.partition("_")
    return {
        "index": 1,
        "name": f"テスト商品 {item}",
        "description": "",
        "headLine": "",
        "inStock": in_stock,
        "url": f"https://store.shopping.yahoo.co.jp/{store}/{item}.html",
        "code": code,
        "condition": "new",
        "imageId": code,
        "image": {
            "small": f"https://item-shopping.c.yimg.jp/i/c/{code}",
            "medium": f"https://item-shopping.c.yimg.jp/i/g/{code}",
        },
        "review": {"rate": 4.5, "count": reviews, "url": ""},
        "affiliateRate": 1.0,
        "price": price,
        "premiumPrice": price,
        "premiumPriceStatus": False,
        "priceLabel": {"taxable": True, "defaultPrice": price, "discountedPrice": None},
        "point": {"amount": price // 100, "times": 1, "bonusAmount": 0, "bonusTimes": 0},
        "shipping": {"code": shipping, "name": SHIPPING.get(shipping, "")},
        "genreCategory": {"id": 1610, "name": "日用品", "depth": 2},
        "brand": {"id": 0, "name": ""},
        "janCode": jan,
        "seller": {
            "sellerId": store,
            "name": f"ストア {store}",
            "url": f"https://store.shopping.yahoo.co.jp/{store}/",
            "isBestSeller": False,
        },
        "delivery": {"area": "13", "deadLine": 14, "day": 1},
        **overrides,
    }


class FakeYahoo(FakeAPI):
    def __init__(self) -> None:
        super().__init__(PATH)
        self.items: dict[str, dict] = {}
        self.stamps: dict[str, int] = {}  # item code -> its update stamp (higher: later)
        self._stamp = 0
        self.behave: dict[str, str] = {}
        self.retry_after: str | None = "120"
        self.app_ids = {APP_ID}
        # Yahoo! JAPAN's requests a day per appid (50,000 without a raise; reset at midnight,
        # Japan time), past which it answers 403 "Your Request was Forbidden". None: not
        # counted (a test that cares sets it low).
        self.per_day: int | None = None
        self.days: dict[tuple[str, dt.date], int] = {}

    def add(self, code: str, **kwargs) -> dict:
        with self.lock:
            self.items[code] = yahoo_hit(code, **kwargs)
            self._touch(code)
            return self.items[code]

    def set(self, item_code: str, /, **changes) -> None:
        """Change an item's fields (`price`, `inStock`, …) as the store would; a new price or
        stock moves its update stamp."""
        with self.lock:
            item = self.items[item_code]
            moved = any(
                item.get(name) != changes[name] for name in ("price", "inStock") if name in changes
            )
            item.update(changes)
            if moved:
                self._touch(item_code)

    def points(self, item_code: str, /, **figures: object) -> None:
        """Set figures of a hit's `point` object (`lyLimitedBonusAmount=90`,
        `lyLimitedPremiumBonusAmount=120`…), the others kept; any value is answered as given,
        a malformed one included."""
        with self.lock:
            self.items[item_code]["point"] = {**self.items[item_code]["point"], **figures}

    def _touch(self, code: str) -> None:
        self._stamp += 1
        self.stamps[code] = self._stamp

    def asked_for_jan(self, jan: str) -> int:
        return sum(1 for query in self.requests if query.get("jan_code") == jan)

    def arrived(self, request: Received) -> Received | None:
        if self.over_allowance(request.query.get("appid", "")):
            return dataclasses.replace(request, fault="rate_limited")
        return request

    def answer(self, request: Received) -> Answer:
        refused = self._refused(request)
        if refused is not None:
            return refused
        query = request.query
        jan = query.get("jan_code", "")
        seller, words = query.get("seller_id", ""), query.get("query", "")
        key = jan or (f"{seller}_{words}" if seller and words else seller or words)
        behaviour = request.fault or self.behave.get(key, "")
        if behaviour == "rate_limited":
            status, headers, body = _json(
                429, {"Error": {"Message": "Your Request Was Rate Limited"}}
            )
            if self.retry_after is not None:
                headers["Retry-After"] = self.retry_after
            return status, headers, body
        if behaviour == "server":
            return _json(500, {"Error": {"Message": "Internal Server Error"}})
        if behaviour == "maintenance":
            body = b"<Error><Message>API_MAINTENANCE</Message><Code>503</Code></Error>"
            return 503, {"Content-Type": "application/xml"}, body
        if behaviour == "stall":
            self.stall()
            return None
        if behaviour == "malformed":
            return 200, {"Content-Type": "application/json"}, b'{"totalResultsAvailable": 1, "hi'
        if behaviour == "not_found":
            return _json(404, {"Error": {"Message": "Not Found"}})
        if behaviour == "bad_appid":
            return _json(403, {"Error": {"Message": "Invalid appid"}})
        if behaviour == "echoing_gateway":
            asked = "&".join(f"{name}={value}" for name, value in query.items())
            error = f"<Error><Message>upstream failed: {request.path}?{asked}</Message></Error>"
            return 502, {"Content-Type": "application/xml"}, error.encode()
        start, results = int(query.get("start", "1")), int(query.get("results", "20"))
        with self.lock:
            found = self._search(query, everything=behaviour == "loose")
            total = len(found)
            hits = [dict(self.items[code]) for code in found[start - 1 : start - 1 + results]]
        if behaviour == "empty":
            hits, total = [], 0
        if behaviour == "missing_fields":
            hits = [{k: v for k, v in hit.items() if k != "price"} for hit in hits]
        if behaviour == "wrong_types":
            hits = [{**hit, "price": str(hit["price"])} for hit in hits]
        return _json(200, yahoo_page(hits, total, start, words))

    def _refused(self, request: Received) -> Answer:
        """The real service's refusals; None when the request may be answered."""
        query = request.query
        if request.path != PATH:
            return _json(404, {"Error": {"Message": "Not Found"}})
        if not query.get("appid"):
            return _xml(400, "Bad Request: Authentication parameters in your request incompleted.")
        if query["appid"] not in self.app_ids:
            return _xml(403, "Your Request was Forbidden")
        if self.per_day is not None:
            day = (query["appid"], dt.datetime.now(JAPAN).date())
            with self.lock:
                self.days[day] = self.days.get(day, 0) + 1
                spent = self.days[day] > self.per_day
            if spent:
                return _xml(403, "Your Request was Forbidden")
        start, results = query.get("start", "1"), query.get("results", "20")
        if not (results.isascii() and results.isdigit()) or not 1 <= int(results) <= RESULTS_MAX:
            return _json(400, {"Error": {"Message": f"results must be 1 to {RESULTS_MAX}"}})
        if (
            not (start.isascii() and start.isdigit())
            or int(start) < 1
            or int(start) + int(results) > RESULTS_WINDOW
        ):
            return _json(400, {"Error": {"Message": "start + results must be 1000 or less"}})
        if query.get("sort", "-score") not in SORTS:
            return _json(400, {"Error": {"Message": "sort is invalid"}})
        return None

    def _search(self, query: dict[str, str], *, everything: bool = False) -> list[str]:
        """The codes of the items the query finds, in the order its sort asks."""
        codes = list(self.items)
        if everything:
            return codes
        if query.get("jan_code"):
            codes = [c for c in codes if self.items[c].get("janCode") == query["jan_code"]]
        if query.get("seller_id"):
            seller = query["seller_id"]
            codes = [c for c in codes if self.items[c]["seller"].get("sellerId") == seller]
        if query.get("query"):
            words = query["query"].split()
            codes = [c for c in codes if all(w in self._text(c) for w in words)]
        if query.get("in_stock") in ("true", "1"):
            codes = [code for code in codes if self.items[code].get("inStock") is True]
        elif query.get("in_stock") in ("false", "0"):
            codes = [code for code in codes if self.items[code].get("inStock") is False]
        sort = query.get("sort", "-score")
        if sort.endswith("price"):
            codes.sort(key=lambda c: self.items[c]["price"], reverse=sort == "-price")
        elif sort == "-review_count":
            codes.sort(key=lambda c: self.items[c]["review"]["count"], reverse=True)
        return codes

    def _text(self, code: str) -> str:
        item = self.items[code]
        return f"{item.get('name', '')} {item.get('code', '')}"


def yahoo_page(hits: list[dict], total: int, start: int, words: str) -> dict:
    """An answer's JSON: `hits` (numbered from `start`) of `total` found for `words`."""
    for index, hit in enumerate(hits, start=start):
        hit["index"] = index
    return {
        "totalResultsAvailable": total,
        "totalResultsReturned": len(hits),
        "firstResultsPosition": start if hits else 0,
        "request": {"query": words},
        "hits": hits,
    }


def _json(status: int, data: dict) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps(data, ensure_ascii=False).encode()
    return status, {"Content-Type": "application/json; charset=UTF-8"}, body


def _xml(status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    body = f'<?xml version="1.0" encoding="utf-8" ?>\n<Error>\n<Message>\n{message}\n</Message>\n'
    body += "</Error>\n"
    return status, {"Content-Type": "application/xml"}, body.encode()
