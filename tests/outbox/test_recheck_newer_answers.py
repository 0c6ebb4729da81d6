"""A dispatch cycle reuses its own answers across its batches only while nothing newer is
known: a poll's later observation of the listing or of the product's offers, or the end of
the points campaign an answer tells, sends the row back to the marketplace's current word —
and the send gate does not hand over a message whose points have ended."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.outbox_helpers import enqueue_for
from tests.watches.test_products import JAN, START, poll_at, watch
from watches.polling.poll import poll_batch
from watches.products.polling import poll_products

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


# A batch does not reuse the cycle's earlier answer over a newer stored observation.


@pytest.mark.parametrize("since", ["price_rose", "item_gone"])
def test_a_later_batch_does_not_send_a_value_a_newer_observation_contradicts(
    recording_channel, frozen, settings, since
):
    """Two rows on one listing, one per batch. Batch 1 asks the listing at NOW (¥900). While
    its delivery is under way, 10 s later, a poll observes the listing again: ¥1,200 (or the
    item is gone: not_found). Batch 2's row is then re-checked: the dispatcher has just
    loaded the listing with that newer observation, yet it judges and tells the ¥900 of
    batch 1 — a notification the system already knows no longer holds."""
    settings.OUTBOX_BATCH_SIZE = 1
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    listing = ListingFactory(price=900)
    first = enqueue_for(
        WatchFactory(listing=listing, target_price=950),
        detected_at=NOW - dt.timedelta(seconds=2),
    )
    second = enqueue_for(WatchFactory(listing=listing, target_price=950))

    def slow_and_a_poll_sees_a_change():
        recording_channel.during = None
        frozen.shift(dt.timedelta(seconds=10))
        if since == "price_rose":
            DemoProduct.objects.filter(item_code=listing.item_code).update(price=1200)
        else:
            DemoProduct.objects.filter(item_code=listing.item_code).delete()
        poll_batch("demo", [listing.pk])

    recording_channel.during = slow_and_a_poll_sees_a_change
    run_cycle()

    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    assert told.get(first.pk) == 900
    later = Outbox.objects.get(pk=second.pk)
    expected = Reason.CONDITION_LOST if since == "price_rose" else Reason.ITEM_NOT_FOUND
    assert (later.status, later.reason) == (Status.DROPPED, expected), (
        f"told ¥{told.get(second.pk)} although a poll observed the listing 10 s after "
        f"that answer and saw {since}"
    )


# The same for a product: a new cheaper shop, found by a poll's whole read.


def test_a_later_batch_does_not_drop_a_product_row_on_the_cycles_older_page(
    product, yahoo, recording_channel, settings
):
    """Two product watches: W1 (target ¥510) is under its line at store4's ¥505; W2 (target
    ¥480) is not. Batch 1 asks the product's page at 21:00 and sends W1. During that
    delivery, 10 s later, a new shop starts selling at ¥450 and a poll reads the page whole
    (OfferPage), finds it and enqueues W2. Batch 2 re-checks W2 on the cycle's page of
    21:00 — without the new shop — and drops it `condition_lost`, although the newest whole
    read (the very one that detected it) says it holds."""
    settings.OUTBOX_BATCH_SIZE = 1
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    w1 = watch(product, device=DeviceFactory(), target_price=510)
    w2 = watch(product, device=DeviceFactory(), target_price=480)
    assert poll_at(20).enqueued == 1
    assert Outbox.objects.get().watch_id == w1.pk

    dispatch = START + dt.timedelta(minutes=21)
    with time_machine.travel(dispatch, tick=False) as traveller:

        def a_new_shop_and_a_poll():
            recording_channel.during = None
            traveller.shift(dt.timedelta(seconds=10))
            yahoo.add("store6_tp-12r", jan=JAN, price=450, name="スコッティ 12ロール (store 6)")
            assert poll_products(force=True).enqueued == 1  # W2's row

        recording_channel.during = a_new_shop_and_a_poll
        run_cycle()

    row2 = Outbox.objects.get(watch=w2)
    assert row2.status == Status.SENT, (row2.status, row2.reason)
    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    assert told[row2.pk] == 450


# Points of a campaign that ended since the answer.


def two_rows_on_a_campaign_ending_in_5_s(recording_channel, frozen):
    """A demo listing at ¥2,000 with a 10× campaign until NOW + 5 s (¥1,820 after points,
    ¥1,982 without), two watches after points at ¥1,900 with a row each, and a first
    delivery that takes 10 s."""
    listing = ListingFactory(price=2000, shipping=0)
    DemoProduct.objects.filter(item_code=listing.item_code).update(
        price=2000, point_rate=10, points_from=None, points_until=NOW + dt.timedelta(seconds=5)
    )
    first = enqueue_for(
        WatchFactory(listing=listing, target_price=1900, after_points=True),
        detected_at=NOW - dt.timedelta(seconds=2),
        price=2000,
    )
    second = enqueue_for(
        WatchFactory(listing=listing, target_price=1900, after_points=True), price=2000
    )

    def slow():
        recording_channel.during = None
        frozen.shift(dt.timedelta(seconds=10))

    recording_channel.during = slow
    return first, second


def test_a_later_batch_does_not_count_points_of_a_campaign_that_ended_since_the_answer(
    recording_channel, frozen, settings
):
    """A demo listing at ¥2,000 with a 10× campaign until NOW + 5 s: 180 pt, ¥1,820 after
    points; 18 pt (¥1,982) without it. Two watches after points, target ¥1,900, one row per
    batch. Batch 1 asks at NOW and sends ¥1,820. Its delivery takes 10 s; batch 2 then
    reuses the cycle's answer of NOW — its campaign ended 5 s ago — and tells ¥1,820 again.
    A poll's observation in the same state would not have been reused
    (`fresh_observations`: a campaign ended by now is no answer): the shop would have been
    asked and the row dropped."""
    settings.OUTBOX_BATCH_SIZE = 1
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    first, second = two_rows_on_a_campaign_ending_in_5_s(recording_channel, frozen)
    run_cycle()

    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    assert told.get(first.pk) == 1820
    later = Outbox.objects.get(pk=second.pk)
    assert (later.status, later.reason) == (Status.DROPPED, Reason.CONDITION_LOST), (
        f"told ¥{told.get(second.pk)} after points of a campaign that ended 5 s before"
    )


def test_an_answer_taken_after_waiting_is_not_reused_with_a_campaign_that_ended_meanwhile(
    recording_channel, frozen, settings, monkeypatch
):
    """Another dispatcher is asking the listing (its mark is in the `locks` cache). It
    observes it at NOW — 10× campaign until NOW + 5 s: 180 pt, ¥1,820 after points — and
    releases its mark 10 s later. This re-check reuses that observation after the wait, but
    checks the campaign against the moment its call began (NOW), not the moment it reads
    (NOW + 10 s): the campaign, ended 5 s before, is counted, and ¥1,820 is told."""
    from watches import services
    from watches.polling import inflight

    settings.OUTBOX_REFETCH_MAX_AGE = 30
    listing = ListingFactory(price=2000, shipping=0)
    DemoProduct.objects.filter(item_code=listing.item_code).update(
        price=2000, point_rate=10, points_from=None, points_until=NOW + dt.timedelta(seconds=5)
    )
    row = enqueue_for(
        WatchFactory(listing=listing, target_price=1900, after_points=True), price=2000
    )
    [unit] = services.feeds.listing_units([listing]).values()
    theirs = inflight.mark([unit], 30)

    def the_other_dispatcher_answers(units, seconds):
        services.refetch([listing.__class__.objects.get(pk=listing.pk)], NOW)
        frozen.shift(dt.timedelta(seconds=10))
        theirs.release()

    monkeypatch.setattr(inflight, "wait_for", the_other_dispatcher_answers)
    run_cycle()

    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    sent = Outbox.objects.get(pk=row.pk)
    assert (sent.status, sent.reason) == (Status.DROPPED, Reason.CONDITION_LOST), (
        f"told ¥{told.get(row.pk)} after points of a campaign that ended 5 s before the send"
    )


def test_a_step_handed_over_after_the_campaign_ended_is_not_told_its_points(
    recording_channel, frozen, settings
):
    """Same campaign (until NOW + 5 s), one batch of two rows on the listing, one delivery at
    a time; the first takes 10 s. The second row's answer is 10 s old — within the bound, so
    the send gate lets it through — but the campaign it counted ended 5 s before it is
    handed over: ¥1,820 is told where the shop now asks ¥1,982 after points."""
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    settings.OUTBOX_DELIVERY_WORKERS = 1
    first, second = two_rows_on_a_campaign_ending_in_5_s(recording_channel, frozen)
    run_cycle()

    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    assert told.get(first.pk) == 1820
    assert second.pk not in told, "told the points of a campaign over 5 s before"
    later = Outbox.objects.get(pk=second.pk)
    assert (later.status, later.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
