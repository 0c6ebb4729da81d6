"""`poll_prices` right after `make run` (every listing just polled) says why it polled nothing
and when the next one falls due, instead of a bare row of zeros; `--force` polls them all."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo

import pytest
import time_machine

from demo.seed import seed_demo
from tests.commands import output_lines
from tests.factories import ListingFactory
from watches.models import Listing, Product
from watches.polling.poll import next_due_at

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))


def poll_prices(*args: str) -> list[str]:
    return output_lines("poll_prices", *args)


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def test_right_after_seeding_nothing_is_due_and_the_hint_says_when_and_how(settings, clock):
    settings.POLL_MINUTES = 15
    seed_demo()  # every demo listing "just polled", as after `make run`
    clock.shift(dt.timedelta(minutes=2))
    counts, hint = poll_prices()
    assert counts == "products=0 listings=0 observations=0 errors=0 enqueued=0"
    assert hint == (
        "0 listings due: each was polled in the last 7.5 min. "
        "The next is due in 6 min (10:07); `poll_prices --force` polls them all now."
    )


def test_force_asks_every_product_then_every_other_active_listing_once(clock):
    seed_demo()
    Listing.objects.filter(item_code="tp-scottie-12r").update(paused=True)
    (counts,) = poll_prices("--force")
    # Every product's offers (one request per product), then every active listing not asked
    # through its product: 36 listings are 36 answers, not 52.
    active = Listing.objects.filter(paused=False).count()
    products = Product.objects.count()
    # (the demo watcher's watches may fire: enqueued varies)
    assert counts.startswith(
        f"products={products} listings={active} observations={active} errors=0 enqueued="
    )


def test_with_no_listing_tracked_the_hint_says_so(clock):
    ListingFactory(paused=True)
    assert poll_prices()[1] == (
        "0 listings due: no listing is being tracked (add one from the home page)."
    )


def test_no_hint_when_something_was_polled_or_in_json(clock):
    ListingFactory(last_polled_at=None)
    assert poll_prices() == ["products=0 listings=1 observations=1 errors=0 enqueued=0"]
    (line,) = poll_prices("--json")
    assert json.loads(line)["listings"] == 0


def test_the_next_due_time_follows_the_polling_rule(settings, clock):
    settings.POLL_MINUTES = 20
    assert next_due_at() is None
    ListingFactory(last_polled_at=NOW - dt.timedelta(minutes=3))
    ListingFactory(last_polled_at=NOW - dt.timedelta(minutes=1))
    assert next_due_at() == NOW + dt.timedelta(minutes=7)
    ListingFactory(last_polled_at=None)
    assert next_due_at() == NOW
