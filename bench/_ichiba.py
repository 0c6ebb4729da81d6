"""The marketplace the dispatch benches re-check against: the path production takes — the
Rakuten adapter over HTTP to a fake Ichiba on 127.0.0.1 (tests/fakes/ichiba.py: it checks the
path, the key and the parameters as the real one does, and refuses a request of an id beyond
its allowance in one wall-clock second), through the real rate limiter of the id.

The listings are offers of products (a JAN code sold by several shops), as a price-comparison
crowd watches them: the dispatcher's re-check asks one page of a product's offers for its rows
on any of them (`watches.products.refetch`), as it does in production. Each offer is sold by a
shop of its own, so no shop's feed answers two of them."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.ichiba import FakeIchiba, key_for

APP_ID = "bench-app"
RATE = 1  # requests a second per application id: Rakuten Ichiba's allowance
OFFERS_PER_PRODUCT = 20  # within one page of offers (30)


class BenchIchiba(FakeIchiba):
    """The fake Ichiba, counting the CPU time its request threads spend (`cpu_seconds`): a
    bench that runs it in its own process takes that out of the process's CPU time, which
    should count our work, not the marketplace's."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu_seconds = 0.0
        fake, handler = self, self.server.RequestHandlerClass
        spent = threading.Lock()

        class Timed(handler):  # type: ignore[valid-type, misc]
            def handle(self) -> None:
                started = time.thread_time()  # this connection's thread, all its requests
                try:
                    super().handle()
                finally:
                    with spent:
                        fake.cpu_seconds += time.thread_time() - started

        self.server.RequestHandlerClass = Timed


def start_ichiba(rate: int = RATE, app_id: str = APP_ID) -> BenchIchiba:
    """A fake Ichiba accepting `app_id` (its key: `key_for`), refusing (429) a request of the
    id beyond `rate` in one wall-clock second, as the real one does."""
    fake = BenchIchiba()
    fake.accept(app_id)
    fake.per_second = rate
    fake.start()
    return fake


def rakuten_env(fake: FakeIchiba, rate: int = RATE, app_id: str = APP_ID) -> dict[str, str]:
    """The environment a process (a dispatcher's, a bench's) starts Django with to ask `fake`
    with `app_id` at `rate` requests a second — as production is configured, the demo
    marketplace off."""
    return {
        "RAKUTEN_APP_ID": app_id,
        "RAKUTEN_ACCESS_KEY": key_for(app_id),
        "RAKUTEN_API_URL": fake.url,
        "RAKUTEN_RATE_PER_SECOND": str(rate),
        "DEMO_MARKET": "0",
    }


def jan_of(product: int) -> str:
    return f"49{product:011d}"


def code_of(n: int) -> str:
    """The item code of the n-th offer: shop n, so no two offers share a shop."""
    return f"shop{n:05d}:bench"


def offsets(counts: list[int]) -> list[int]:
    """The first offer of each of several sets of `counts` offers stocked side by side, each
    set starting a product of its own (no product's page holds offers of two sets)."""
    firsts, at = [], 0
    for count in counts:
        firsts.append(at)
        at += -(-count // OFFERS_PER_PRODUCT) * OFFERS_PER_PRODUCT
    return firsts


def stock(fake: FakeIchiba, count: int, price: int = 900, first: int = 0) -> list[str]:
    """`count` items at `price`, in stock, offers `first`… of products of OFFERS_PER_PRODUCT
    offers each (`first` a multiple of it: `offsets`). Returns their item codes."""
    codes = [code_of(n) for n in range(first, first + count)]
    for n, code in enumerate(codes, start=first):
        fake.add(code, price=price, jan=jan_of(n // OFFERS_PER_PRODUCT))
    return codes


def rakuten_offers(count: int, price: int = 900, first: int = 0) -> list:
    """The listings of `stock`'s items, each the offer of its product, described as a poll left
    it (name, shop, link, picture, shipping and points as the fake answers them): a re-fetch
    has nothing but the price to write, as in production."""
    from django.utils import timezone

    from tests.fakes.ichiba import ichiba_item
    from watches.marketplaces.rakuten import parse_item
    from watches.models import Listing, Product
    from watches.polling.observations import _remember

    assert first % OFFERS_PER_PRODUCT == 0, "a product's offers in one set (`offsets`)"
    start = first // OFFERS_PER_PRODUCT
    products = Product.objects.bulk_create(
        Product(jan=jan_of(p), name=f"bench product {p}")
        for p in range(start, start + -(-count // OFFERS_PER_PRODUCT))
    )
    listings = []
    now = timezone.now()
    for n in range(first, first + count):
        item = ichiba_item(code_of(n), price=price)
        # What the adapter reads of the answer: a point the poll left with other shipping or
        # points than the answer's would make every re-fetch write one.
        seen = parse_item(item, now)
        product = products[n // OFFERS_PER_PRODUCT - start]
        listing = Listing(
            source="rakuten", item_code=code_of(n), product_id=product.pk, jan=product.jan
        )
        _remember(listing, seen)  # the observation rule's own record of what a poll saw
        listing.last_polled_at = None  # each bench says when that poll was
        listings.append(listing)
    return Listing.objects.bulk_create(listings, batch_size=2000)
