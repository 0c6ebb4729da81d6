"""A shop's feed vouches for a listing it does not show only where it truly showed every
change since the listing was last observed: not on one old item's place, not on an old order
whose prices changed, not on a short or empty page, not for a listing whose last request
failed or that was paused. And the quarter of a run given to the listings known longest ago
is asked even when the run is cut short."""

from __future__ import annotations

import datetime as dt
import types

import pytest

from tests.watches.test_poll_shapes import T0, listing, reach, shapes_of
from watches.marketplaces.base import Ask, Observation, Page, Shape
from watches.models import ShopFeed
from watches.polling import feeds
from watches.polling.plan import plan
from watches.polling.poll import due_listings

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


def page(codes: list[str], at: dt.datetime, total: int | None = None, shop: str = "s") -> Page:
    items = tuple(Observation(code, 100, True, at, extra={"shop": shop}) for code in codes)
    return Page(Ask(Shape.SHOP, shop), items, at, total=total)


# The last item of a page alone "proves" the order resumes.


def test_the_last_item_alone_does_not_prove_the_order_resumes():
    """s:hidden (below page 1) changed, then s:29 (on the last page) changed again, then 29
    other items: page 1 is the 29 new ones and s:29 last. s:hidden's change is on page 2:
    the read did not reach back, whatever s:29's place says."""
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(30)], first), 30)

    feeds._learn_from(feed, page([f"s:new{n}" for n in range(29)] + ["s:29"], T0), 30)

    assert feed.complete_since == T0
    observed_between = first + dt.timedelta(minutes=1)
    assert not feed.shows_unchanged(observed_between)


# A shop that re-prices its catalogue in the same order.


def test_a_catalogue_repriced_in_its_old_order_is_not_taken_for_unchanged(time_machine, ichiba):
    """A shop updates every price in the same order as last time (a CSV upload, a
    storewide sale): page 1 comes back in exactly its old order, every item on it changed.
    The 30 below it changed too; a watched one there crossed its line."""
    time_machine.move_to(T0 - dt.timedelta(hours=2), tick=False)
    codes = [f"s:{n}" for n in range(60)]
    for code in codes:
        ichiba.add(code, price=1000)
    feeds.poll_shops("rakuten", ["s"])  # page 1: s:59 … s:30

    time_machine.move_to(T0 - dt.timedelta(hours=1), tick=False)
    below = listing("s:5", price=1000, target=950, last_polled_at=T0 - dt.timedelta(hours=1))
    listing("s:6", price=1000, target=950, last_polled_at=T0 - dt.timedelta(hours=1))

    time_machine.move_to(T0 - dt.timedelta(minutes=30), tick=False)
    for code in codes:  # the storewide sale, in catalogue order
        ichiba.set(code, price=900)
    feeds.poll_shops("rakuten", ["s"])  # page 1 again: s:59 … s:30, in the same order

    feed = ShopFeed.objects.get(source="rakuten", shop="s")
    assert feed.complete_since == T0 - dt.timedelta(minutes=30), "the read did not reach back"
    time_machine.move_to(T0, tick=False)
    chosen = plan(due_listings(T0), T0, reaches=reach(10))
    assert (Shape.ITEM, below.pk) in shapes_of(chosen)


# A failed item request counts as an observation inside the chain.


def test_a_failed_item_request_is_not_an_observation_a_complete_feed_vouches_for(clock):
    """Both listings were last *asked* an hour ago, inside a chain of complete reads that
    began two hours ago; `read:failed`'s ask failed (HTTP 503), so its price is from before
    the chain — a change then is on no page. It needs a request of its own; the plan lets
    the shop's feed "answer" it, run after run, spare budget or not."""
    from watches.marketplaces.base import FetchError, FetchKind
    from watches.polling.observations import observe

    # Observed 3 h ago (before the chain began); its own request 1 h ago failed.
    failed = listing("read:failed", target=995, last_polled_at=T0 - dt.timedelta(hours=3))
    an_hour_ago = T0 - dt.timedelta(hours=1)
    observe([(failed, FetchError(FetchKind.SERVER, "HTTP 503"))], an_hour_ago).save()
    failed.refresh_from_db()
    assert failed.last_polled_at == an_hour_ago and failed.price == 1000
    listing("read:fine", target=995)
    ShopFeed.objects.create(
        source="rakuten",
        shop="read",
        read_at=T0 - dt.timedelta(minutes=5),
        complete_since=T0 - dt.timedelta(hours=2),
        updates_per_hour=6.0,
        top=["read:other"],
    )

    chosen = plan(due_listings(T0), T0, reaches=reach(10))

    assert (Shape.ITEM, failed.pk) in shapes_of(chosen)


# A change a page showed while the listing was paused is taken for "unchanged".


def test_a_change_shown_while_paused_is_not_known_unchanged_once_resumed(time_machine, ichiba):
    """Staff pause s:a; its price falls below its watcher's target; a complete read of its
    shop shows it and (paused) does not keep it; more changes push it off page 1. Staff
    resume it: the plan takes it for unchanged since its last observation — the feed
    "showed every change" — and asks the shop's page, on which it no longer is."""
    from watches.services import pause_listings, resume_listings

    for code in ("s:b", "s:a", *(f"s:{n}" for n in range(38))):
        ichiba.add(code, price=1000)
    time_machine.move_to(T0 - dt.timedelta(hours=2), tick=False)
    feeds.poll_shops("rakuten", ["s"])  # page 1: s:37 … s:8 — the chain begins

    a = listing("s:a", target=950, last_polled_at=T0 - dt.timedelta(minutes=90))
    listing("s:b", target=950, last_polled_at=T0 - dt.timedelta(minutes=90))
    pause_listings([a.pk])

    time_machine.move_to(T0 - dt.timedelta(minutes=60), tick=False)
    ichiba.set("s:a", price=900)
    feeds.poll_shops("rakuten", ["s"])  # shows s:a at 900, first; reaches back
    for n in range(20):
        ichiba.set(f"s:{n}", price=990)
    time_machine.move_to(T0 - dt.timedelta(minutes=40), tick=False)
    feeds.poll_shops("rakuten", ["s"])  # s:a at 20th place; reaches back
    for n in range(20, 38):
        ichiba.set(f"s:{n}", price=990)
    time_machine.move_to(T0 - dt.timedelta(minutes=20), tick=False)
    feeds.poll_shops("rakuten", ["s"])  # s:a off page 1; reaches back (s:19, s:18 …)
    feed = ShopFeed.objects.get(source="rakuten", shop="s")
    assert feed.complete_since == T0 - dt.timedelta(hours=2) and "s:a" not in feed.top

    resume_listings([a.pk])  # staff resume it
    time_machine.move_to(T0, tick=False)
    chosen = plan(due_listings(T0), T0, reaches=reach(10))

    assert (Shape.ITEM, a.pk) in shapes_of(chosen), "its ¥900 was read, never kept or judged"


# A short or empty page 1 taken for the shop's whole catalogue.


def test_a_short_page_whose_total_says_more_is_not_the_whole_catalogue():
    """Page 1 holds 5 items but the answer's `count` says the shop has 100: the other 95
    are not on it, so the read did not show every change (nothing of the last read's order
    is on it either). The feed must not vouch for a listing it did not show."""
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(5)], first, total=5), 30)
    assert feed.complete_since == first

    feeds._learn_from(feed, page([f"s:new{n}" for n in range(5)], T0, total=100), 30)

    assert feed.complete_since == T0, "a page that holds 5 of 100 items reached back nowhere"
    assert not feed.shows_unchanged(first + dt.timedelta(minutes=1))


def test_an_empty_page_does_not_vouch_for_the_shops_listings(time_machine, ichiba):
    """A shop with two watched listings closes (or its feed answers `count: 0`): page 1
    comes back empty, taken for the whole catalogue, the read "complete" and the shop's pace
    learned as nought. The plan then takes both listings for unchanged and in stock run
    after run — the shop's empty page "answers" them, also in the oldest quarter — and never
    asks either on its own (its own request would answer `empty`: out of stock)."""
    for code in ("s:a", "s:b"):
        ichiba.add(code, price=1000)
    time_machine.move_to(T0 - dt.timedelta(hours=2), tick=False)
    a = listing("s:a", target=950, last_polled_at=None)
    b = listing("s:b", target=950, last_polled_at=None)
    feeds.poll_shops("rakuten", ["s"])  # both shown: the chain begins
    a.refresh_from_db()
    assert a.last_polled_at == T0 - dt.timedelta(hours=2)

    for code in ("s:a", "s:b"):  # the shop closes
        del ichiba.items[code]
    for minutes in (60, 30):
        time_machine.move_to(T0 - dt.timedelta(minutes=minutes), tick=False)
        feeds.poll_shops("rakuten", ["s"])  # count 0, no items

    time_machine.move_to(T0, tick=False)
    chosen = shapes_of(plan(due_listings(T0), T0, reaches=reach(10)))

    assert (Shape.ITEM, a.pk) in chosen and (Shape.ITEM, b.pk) in chosen, chosen


def test_the_recheck_reads_on_past_a_full_page_with_an_unread_item(monkeypatch):
    """A full page of which one item could not be read (`Page.unread`) is still full: the
    shop holds more, and the next page is read for the listings still missing, rather than
    each asked by a request of its own."""
    adapter = types.SimpleNamespace(per_page=3, shop_of=lambda code: code.partition(":")[0])
    monkeypatch.setattr(feeds, "_adapter_with_feeds", lambda source: adapter)
    catalogue = {
        1: (("s:a", "s:b"), 1),  # 3 items, one unreadable: full
        2: (("s:x", "s:y", "s:z"), 0),
    }
    asked: list[int] = []

    def answer(source, asks, call, default):
        answers = {}
        for one in asks:
            asked.append(one.page)
            codes, unread = catalogue.get(one.page, ((), 0))
            items = tuple(Observation(code, 100, True, T0) for code in codes)
            answers[one] = Page(ask=one, items=items, observed_at=T0, unread=unread)
        return answers

    monkeypatch.setattr(feeds, "ask", answer)
    mine = [types.SimpleNamespace(id=i, item_code=code) for i, code in enumerate(["s:x", "s:y"])]

    found = feeds.answer_together("rakuten", mine)

    assert asked == [1, 2]
    assert set(found) == {0, 1}
