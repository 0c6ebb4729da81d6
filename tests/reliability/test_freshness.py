"""How fresh is fresh enough: what OUTBOX_REFETCH_MAX_AGE trades, measured on both sides.

A simulated market (the fake Rakuten Ichiba on 127.0.0.1, its prices moving with time) is
polled; every crossing of a watch's target is enqueued by the real poll; a dispatch cycle
comes 0–60 s later (the schedule runs it every minute) and delivers through a channel that
takes a moment per delivery. For each bound it counts the notifications that no longer held
when they were sent — "at or below your ¥X" while the marketplace already asked more — and
the requests the dispatcher spent at the marketplace. Time is simulated (time-machine), so a
120 s bound costs no 120 s of waiting. The figures chose the default
(docs/decisions/0065-refetch-max-age.md); the small version runs a few passes, the full one
(`--reliability-full`) the decision's."""

from __future__ import annotations

import datetime as dt
import random

import pytest
import time_machine
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason
from tests.factories import DeviceFactory, ListingFactory
from watches.models import Trigger, Watch
from watches.polling.poll import poll

START = dt.datetime(2026, 12, 1, 1, 0, tzinfo=dt.UTC)
TARGET = 1000
# How often each price moves, on average: a busy market (once a minute: a sale's last
# hours, a price war) and a calm one (once an hour: an ordinary shop's day). Each move is up
# to 5 % either way, prices staying around the watches' target.
MARKETS = {"busy": 1 / 60, "calm": 1 / 3600}
# Where the listings are sold: each item in a shop of its own (every re-check asks for its
# item alone), or the busy market's items in four shops (rows due together for one shop are
# re-checked through its feed's first pages: one request answers several).
LAYOUTS = {"own shop": None, "4 shops": 4}
STEP = 0.05
# One delivery takes this long (the channel, one at a time).
DELIVERY_SECONDS = 0.5


class Market:
    """Each item's price as a function of time: piecewise constant, moving at random moments
    (the same for every bound, from the same seed)."""

    def __init__(
        self, codes: list[str], start: float, seconds: int, seed: int, rate: float
    ) -> None:
        rng = random.Random(seed)
        self.moves: dict[str, list[tuple[float, int]]] = {}
        for code in codes:
            price, moves = rng.randint(TARGET - 30, TARGET + 30), []
            moves.append((start - 1, price))
            for second in range(seconds):
                if rng.random() < rate:
                    price = round(min(max(price * (1 + rng.uniform(-STEP, STEP)), 800), 1200))
                    moves.append((start + second, price))
            self.moves[code] = moves

    def price(self, code: str, at: float) -> int:
        return next(price for moment, price in reversed(self.moves[code]) if moment <= at)


@pytest.mark.parametrize("bound", [5, 30, 120])
@pytest.mark.django_db
def test_what_the_refetch_bound_trades(ichiba, recording_channel, settings, full, figures, bound):
    passes, listings_n, watches_per_listing = (40, 20, 5) if full else (4, 10, 2)
    settings.OUTBOX_REFETCH_MAX_AGE = bound
    settings.OUTBOX_DELIVERY_WORKERS = 1  # deliveries take simulated time one after another
    settings.RAKUTEN_RATE_PER_SECOND = 1000.0  # the simulated seconds are the limit here
    markets: dict[str, Market] = {}
    answer = ichiba.answer

    def at_market_price(request):
        # The market's price at the moment of the request, for the item asked or for every
        # item of the shop whose page is asked (a changed price moves it up the feed).
        now = timezone.now().timestamp()
        code, shop = request.query.get("itemCode", ""), request.query.get("shopCode", "")
        asked = [code] if code else [c for c in list(ichiba.items) if c.split(":")[0] == shop]
        for each in asked:
            market = markets.get(each.partition("-")[0])
            if market is None:
                continue
            if each in ichiba.items:
                ichiba.set(each, price=market.price(each, now))
            else:
                ichiba.add(each, price=market.price(each, now))
        return answer(request)

    ichiba.answer = at_market_price
    recording_channel.during = lambda: traveller.shift(dt.timedelta(seconds=DELIVERY_SECONDS))
    with time_machine.travel(START, tick=False) as traveller:
        runs = [("busy", "own shop"), ("calm", "own shop"), ("busy", "4 shops")]
        for name, layout in runs if full else [("busy", "own shop"), ("busy", "4 shops")]:
            shops = LAYOUTS[layout]
            key = name if shops is None else f"{name}shops"  # each run its own items
            codes = [
                f"{key}-{i}:item" if shops is None else f"{key}-{i % shops}:item{i}"
                for i in range(listings_n)
            ]
            # Each run's prices move from its own start on (the clock goes on from the last).
            begun = timezone.now().timestamp()
            markets[key] = Market(codes, begun, passes * 600 + 600, seed=11, rate=MARKETS[name])
            for code in codes:  # in the marketplace's catalogue from the start
                ichiba.add(code, price=markets[key].price(code, begun))
            found = _passes(
                ichiba,
                recording_channel,
                traveller,
                markets[key],
                codes,
                passes,
                watches_per_listing,
            )
            sent = len(found["told"])
            stale = sum(1 for market_price in found["told"] if market_price > TARGET)
            figures(
                "freshness",
                market=name,
                shops=layout,
                bound=bound,
                passes=passes,
                detected=found["detected"],
                sent=sent,
                dropped_on_recheck=found["dropped"],
                counted_retries=found["retries"],
                no_longer_held=stale,
                no_longer_held_pct=round(100 * stale / sent, 2) if sent else 0,
                dispatch_requests=found["requests"],
                requests_per_sent=round(found["requests"] / sent, 2) if sent else 0,
            )
            assert sent > 0
            assert found["retries"] == 0, "a quick marketplace and a healthy channel"


def _passes(ichiba, channel, traveller, market, codes, passes, per_listing) -> dict:
    """`passes` times, 10 minutes apart: new watches on every listing, a poll, a dispatch
    cycle 0–60 s later (the same delays for every bound). What was detected, the market's
    price at each delivery's start, and the dispatcher's requests."""
    rng = random.Random(7)
    start = timezone.now()
    listings = [
        ListingFactory.create(
            source="rakuten",
            item_code=code,
            price=TARGET,
            units_per_pack=None,
            last_polled_at=start - dt.timedelta(hours=1),
        )
        for code in codes
    ]
    found: dict = {"detected": 0, "told": [], "requests": 0, "dropped": 0, "retries": 0}
    for pass_ in range(passes):
        traveller.move_to(start + dt.timedelta(minutes=10 * pass_))
        watches = Watch.objects.bulk_create(
            Watch(
                device=DeviceFactory.create(),
                listing=listing,
                trigger=Trigger.TARGET_PRICE,
                target_price=TARGET,
            )
            for listing in listings
            for _ in range(per_listing)
        )
        poll(codes=codes)
        asked = len(ichiba.requests)
        traveller.shift(dt.timedelta(seconds=rng.uniform(0, 60)))
        told = len(channel.delivered)
        run_cycle()
        found["requests"] += len(ichiba.requests) - asked
        for row_id, _ in channel.delivered[told:]:
            row = Outbox.objects.select_related("watch__listing").get(pk=row_id)
            assert row.sent_at is not None  # delivered this cycle
            went_out = row.sent_at.timestamp() - DELIVERY_SECONDS
            found["told"].append(market.price(row.watch.listing.item_code, went_out))
        rows = Outbox.objects.filter(watch__in=watches)
        found["detected"] += rows.count()
        found["dropped"] += rows.filter(reason=Reason.CONDITION_LOST).count()
        found["retries"] += sum(rows.values_list("retry_count", flat=True))
        Watch.objects.filter(pk__in=[w.pk for w in watches]).update(removed_at=timezone.now())
    return found
