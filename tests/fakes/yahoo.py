"""A fake Yahoo! Shopping Item Search API v3: a real HTTP server on 127.0.0.1, in a thread.

It answers `GET /ShoppingWebService/V3/itemSearch?appid=…` in the documented JSON shape
(`totalResultsAvailable`, `totalResultsReturned`, `firstResultsPosition`, `request`,
`hits[]`) for the items a test puts in (`add`), in both shapes the adapter asks:

- `jan_code=…&sort=+price&results=N`: every item with that JAN code, cheapest first;
- `seller_id=store&query=item`: the store's items whose code contains the query.

It misbehaves on demand per JAN code or item code (`behave[key] = "…"`):

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
    bad_appid       403 {"Error": {"Message": "Invalid appid"}} (any request with a wrong appid)

Every request is recorded (`requests`) so tests can count what was asked, and how often.
"""

from __future__ import annotations

import json

from tests.fakes.server import Answer, FakeAPI

APP_ID = "test-yahoo-app-id"
PATH = "/ShoppingWebService/V3/itemSearch"
# shipping.code as the API documents it.
SHIPPING = {1: "設定なし", 2: "送料無料", 3: "条件付き送料無料"}


def yahoo_hit(
    code: str,
    *,
    jan: str = "",
    price: int = 500,
    in_stock: bool = True,
    shipping: int = 2,
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
        "review": {"rate": 4.5, "count": 12, "url": ""},
        "affiliateRate": 1.0,
        "price": price,
        "premiumPrice": price,
        "premiumPriceStatus": False,
        "priceLabel": {"taxable": True, "defaultPrice": price, "discountedPrice": None},
        "point": {"amount": price // 100, "times": 1},
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
        self.behave: dict[str, str] = {}
        self.retry_after: str | None = "120"

    def add(self, code: str, **kwargs) -> dict:
        with self.lock:
            self.items[code] = yahoo_hit(code, **kwargs)
            return self.items[code]

    def set(self, item_code: str, /, **changes) -> None:
        """Change an item's fields (`price`, `inStock`, …) as the store would."""
        with self.lock:
            self.items[item_code].update(changes)

    def asked_for_jan(self, jan: str) -> int:
        return sum(1 for query in self.requests if query.get("jan_code") == jan)

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        if path != PATH:
            return _json(404, {"Error": {"Message": "Not Found"}})
        if query.get("appid") != APP_ID:
            return _json(403, {"Error": {"Message": "Invalid appid"}})
        jan = query.get("jan_code", "")
        seller, words = query.get("seller_id", ""), query.get("query", "")
        key = jan or f"{seller}_{words}"
        behaviour = self.behave.get(key, "")
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
            return self.stall()
        if behaviour == "malformed":
            return 200, {"Content-Type": "application/json"}, b'{"totalResultsAvailable": 1, "hi'
        if behaviour == "not_found":
            return _json(404, {"Error": {"Message": "Not Found"}})
        if behaviour == "bad_appid":
            return _json(403, {"Error": {"Message": "Invalid appid"}})
        with self.lock:
            items = [dict(item) for item in self.items.values()]
        if behaviour == "loose":
            hits = items
        elif jan:
            hits = [item for item in items if item.get("janCode") == jan]
        else:
            hits = [
                item
                for item in items
                if item["seller"].get("sellerId") == seller and words in str(item["code"])
            ]
        if query.get("sort") == "+price":
            hits.sort(key=lambda item: item["price"])
        hits = hits[: int(query.get("results", "20"))]
        if behaviour == "empty":
            hits = []
        if behaviour == "missing_fields":
            hits = [{k: v for k, v in hit.items() if k != "price"} for hit in hits]
        if behaviour == "wrong_types":
            hits = [{**hit, "price": str(hit["price"])} for hit in hits]
        for index, hit in enumerate(hits, start=1):
            hit["index"] = index
        page = {
            "totalResultsAvailable": len(hits),
            "totalResultsReturned": len(hits),
            "firstResultsPosition": 1,
            "request": {"query": words},
            "hits": hits,
        }
        return _json(200, page)


def _json(status: int, data: dict) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps(data, ensure_ascii=False).encode()
    return status, {"Content-Type": "application/json; charset=UTF-8"}, body
