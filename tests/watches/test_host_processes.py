"""Processes of one host without Redis, as `make run` runs them (the cluster's workers, an
operator's `dispatch_outbox`), asking the fake Ichiba at once:

- they take their requests from one budget per application id (`watches.marketplaces.
  hostlimit`): the fake, which counts arrivals per wall-clock second as Rakuten does, never
  sees more than the id's allowance in one second and refuses nothing;
- two dispatchers re-checking rows on one product's offers ask its page once
  (`watches.polling.inflight`, through the file cache the host's processes share).

Real processes on the test database (a file on SQLite, PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

import pytest

from outbox.models import Outbox, Status
from tests import processes
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, ichiba_offers
from tests.fakes.ichiba import ACCESS_KEY, APP_ID
from tests.outbox_helpers import enqueue_for
from tests.reliability.world import child_env
from watches.pages.watchlist import WatchParams
from watches.products.watches import save_product_watch

pytestmark = pytest.mark.django_db(transaction=True)

RATE = 2


def env_for(ichiba, tmp_path, **extra: object) -> dict[str, str]:
    """Processes of one host: one VAR_DIR (the budget's file, the `locks` cache)."""
    return child_env(
        DJANGO_SETTINGS_MODULE="tests.host_settings",
        YASUGORO_VAR_DIR=tmp_path / "var",
        RAKUTEN_APP_ID=APP_ID,
        RAKUTEN_ACCESS_KEY=ACCESS_KEY,
        RAKUTEN_API_URL=ichiba.url,
        RAKUTEN_RATE_PER_SECOND=RATE,
        **extra,
    )


def item_requests(ichiba) -> list[str]:
    return [q["itemCode"] for q in ichiba.requests if "itemCode" in q]


def test_two_dispatchers_and_a_poller_of_one_host_share_one_budget_per_id(ichiba, tmp_path):
    ichiba.per_second = RATE
    # Each listing alone in its shop: one item request each, to the re-check as to the poll.
    rows = []
    for n in range(8):
        code = f"shop{n}:tp-12"
        ichiba.add(code, price=900)
        listing = ListingFactory(source="rakuten", item_code=code, price=900, units_per_pack=None)
        watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=1000)
        rows.append(enqueue_for(watch, price=900, line="1000").pk)
    for n in range(8, 16):
        code = f"shop{n}:tp-12"
        ichiba.add(code, price=900)
        ListingFactory(source="rakuten", item_code=code, last_polled_at=None)

    # Small batches, so the two dispatchers both ask, side by side with the poll.
    done = processes.together(
        env_for(ichiba, tmp_path, OUTBOX_BATCH_SIZE=2),
        tmp_path,
        "share",
        ("dispatch", "dispatch", "poll"),
    )

    assert ichiba.too_many == 0, ichiba.max_per_second()
    assert ichiba.max_per_second() == {APP_ID: RATE}
    assert len(item_requests(ichiba)) >= 16, "every row re-checked, every due listing polled"
    assert done[2]["errors"] == 0
    assert set(Outbox.objects.filter(pk__in=rows).values_list("status", flat=True)) == {Status.SENT}


JAN = "4901750404406"


def test_two_dispatchers_on_one_products_offers_ask_its_page_once(ichiba, tmp_path):
    _, offers = ichiba_offers(ichiba, JAN, price_now=900, price=900, units_per_pack=None)
    # Eight watchers of each offer, their rows due offer after offer: every batch of four
    # holds rows on the three offers, so both dispatchers' first batches need their page.
    rows = []
    for _ in range(8):
        for listing in offers:
            watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=1000)
            rows.append(enqueue_for(watch, price=900, line="1000").pk)

    two_dispatchers_ask_the_page_once(ichiba, tmp_path, "offers", rows)


def test_two_dispatchers_on_one_products_watches_ask_its_page_once(ichiba, tmp_path):
    product, _ = ichiba_offers(ichiba, JAN, price_now=900, price=1100, units_per_pack=None)
    # Sixteen watchers of the product: both dispatchers' first batches need its page.
    params = WatchParams(trigger="target_price", target_price=1000)
    rows = []
    for _ in range(16):
        watch, _ = save_product_watch(DeviceFactory(), product, params)
        rows.append(enqueue_for(watch, price=900, line="1000").pk)

    two_dispatchers_ask_the_page_once(ichiba, tmp_path, "product", rows)


def two_dispatchers_ask_the_page_once(ichiba, tmp_path, name: str, rows: list[int]) -> None:
    done = processes.together(
        env_for(ichiba, tmp_path, OUTBOX_BATCH_SIZE=4), tmp_path, name, ("dispatch", "dispatch")
    )

    keywords = [q["keyword"] for q in ichiba.requests if "keyword" in q]
    assert keywords == [JAN], "one page of the product's offers for both"
    assert not item_requests(ichiba)
    assert all(out["sent"] for out in done), "both dispatchers sent rows"
    assert set(Outbox.objects.filter(pk__in=rows).values_list("status", flat=True)) == {Status.SENT}
