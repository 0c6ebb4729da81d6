"""A watch after points and shipping, end to end against the fake Rakuten Ichiba and Yahoo!
Shopping on 127.0.0.1: a campaign that starts enqueues, one that ends before the re-check
drops the row `points_ended` (worded for people on /notifications/), the message carries the
breakdown from the fresh answer, member-only points count only for a member, and a product
watch takes the cheapest offer after points, whichever shop."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine

from outbox.dispatch import run_cycle
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, device_with_cookie
from tests.watches.test_products import JAN, five_shops, watch
from watches.models import Channel, Listing, PricePoint, Trigger
from watches.polling.poll import poll
from watches.products.intake import add_product
from watches.products.polling import poll_products

pytestmark = pytest.mark.django_db

JST = zoneinfo.ZoneInfo("Asia/Tokyo")
# Inside a 5× campaign that runs 3/13 19:00 to 3/19 13:59 (Japan time).
NOW = dt.datetime(2026, 3, 19, 13, 0, tzinfo=JST)
CODE = "yasu-shop:tp-12r"
OPEN = ("2026-03-13 19:00", "2026-03-19 13:59")


@pytest.fixture
def listing(ichiba, settings):
    """A Rakuten listing at ¥1,980 with free shipping: 18 pt at the standard 1 %, 90 pt at
    5×. Its last poll was an hour ago."""
    settings.POLL_HISTORY_MIN_MINUTES = 180
    ichiba.add(CODE, price=1980)
    return ListingFactory(
        source="rakuten",
        item_code=CODE,
        price=1980,
        shipping=0,
        last_polled_at=NOW - dt.timedelta(hours=1),
    )


def after_points(listing: Listing, device=None, **fields):
    """A watch after points and shipping: "at or below ¥1,900"."""
    return WatchFactory(
        listing=listing,
        device=device or DeviceFactory(),
        target_price=1900,
        after_points=True,
        **fields,
    )


def at(moment: dt.datetime, action):
    with time_machine.travel(moment, tick=False):
        return action()


def test_a_campaign_that_starts_enqueues(listing, ichiba, recording_channel):
    made = after_points(listing)
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == 0, "¥1,980 − 18 pt = ¥1,962"
    ichiba.campaign(CODE, 5, *OPEN)

    assert at(NOW + dt.timedelta(minutes=10), lambda: poll(codes=[CODE])).enqueued == 1

    snapshot = Outbox.objects.get(watch=made).detected_payload
    assert (snapshot["points"], snapshot["points_counted"], snapshot["net_price"]) == (90, 90, 1890)
    assert snapshot["after_points"] is True and snapshot["value"] == "1890"
    assert snapshot["points_until"] == "2026-03-19T14:00:00+09:00"
    # The campaign's start is a change the history records, within the quiet minutes.
    assert list(
        PricePoint.objects.filter(listing=listing).order_by("observed_at").values_list("points")
    ) == [(18,), (90,)]


def test_a_watch_on_the_price_incl_shipping_ignores_the_points(listing, ichiba, recording_channel):
    WatchFactory(listing=listing, target_price=1900)  # after_points False, as before
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == 0, "¥1,980 incl. shipping"


def test_a_campaign_that_ends_before_the_recheck_drops_the_row_points_ended(
    listing, ichiba, recording_channel
):
    made = after_points(listing)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW + dt.timedelta(minutes=50), lambda: poll(codes=[CODE])).enqueued == 1

    # The shop's window is answered as before: its end, 13:59, is past at 14:01.
    at(dt.datetime(2026, 3, 19, 14, 1, tzinfo=JST), run_cycle)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.POINTS_ENDED)
    assert recording_channel.delivered == []
    fresh = OutboxEvent.objects.get(outbox=row, to_status=Status.DROPPED).data["fresh"]
    assert (fresh["price"], fresh["points"], fresh["point_rate"]) == (1980, 18, None)
    listing.refresh_from_db()
    assert (listing.points, listing.points_until) == (18, None)


def test_a_campaign_the_shop_stops_answering_early_is_points_ended_too(
    listing, ichiba, recording_channel
):
    """Rakuten stops answering a multiplier a day before its end (docs/marketplaces.md):
    the points fall back to the standard before the window's end."""
    made = after_points(listing)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == 1
    ichiba.campaign(CODE, 1, "", "")

    at(NOW + dt.timedelta(minutes=5), run_cycle)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.POINTS_ENDED)


def test_a_price_that_went_up_is_still_condition_lost(listing, ichiba, recording_channel):
    made = after_points(listing)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == 1
    ichiba.set(CODE, price=2400)  # 5× of ¥2,400 is 105 pt: ¥2,295, above the line anyway

    at(NOW + dt.timedelta(minutes=5), run_cycle)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)


def test_a_polls_observation_whose_campaign_ended_since_is_not_reused(
    listing, ichiba, recording_channel, settings
):
    """A poll's observation young enough to serve as the re-check's answer is not one once
    its campaign has ended: the dispatcher asks the shop."""
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    made = after_points(listing)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(dt.datetime(2026, 3, 19, 13, 59, 50, tzinfo=JST), lambda: poll(codes=[CODE])).enqueued
    asked = ichiba.asked(CODE)

    at(dt.datetime(2026, 3, 19, 14, 0, 5, tzinfo=JST), run_cycle)

    assert ichiba.asked(CODE) == asked + 1, "asked again, 15 s after the poll"
    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.POINTS_ENDED)


@pytest.mark.parametrize(
    ("language", "body"),
    [
        (
            "en",
            "Now ¥1,800 — at or below your ¥1,900. "
            "¥1,980 − 180 pt (10×, until 3/19 13:59) = ¥1,800, free shipping.",
        ),
        (
            "ja",
            "¥1,980 − 180ポイント（10倍・3/19 13:59まで） ＝ 実質¥1,800、送料無料。",
        ),
    ],
)
def test_the_message_carries_the_breakdown_of_the_fresh_answer(
    listing, ichiba, recording_channel, language, body
):
    made = after_points(listing, device=DeviceFactory(language=language))
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == 1
    ichiba.campaign(CODE, 10, *OPEN)  # the shop raised it before the send

    at(NOW + dt.timedelta(minutes=5), run_cycle)

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.SENT, (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert body in message.body
    assert message.price == 1800, "the price after points is what was told"
    made.refresh_from_db()
    assert made.last_notified_price == 1800, "the baseline is the price after points"


def test_the_history_page_words_points_ended_and_shows_both_breakdowns(
    listing, ichiba, recording_channel, client
):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    made = after_points(listing, device=device)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW + dt.timedelta(minutes=50), lambda: poll(codes=[CODE])).enqueued == 1
    at(dt.datetime(2026, 3, 19, 14, 1, tzinfo=JST), run_cycle)
    assert Outbox.objects.get(watch=made).reason == Reason.POINTS_ENDED

    english = client.get("/notifications/").content.decode()
    assert "points campaign ended before we could tell you" in english
    assert "Seen at ¥1,890; ¥1,962 when we checked again." in english
    assert "(5×, until 3/19 13:59)" in english
    japanese = client.get("/notifications/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "ポイントキャンペーンが終わり" in japanese
    assert "（5倍・3/19 13:59まで）" in japanese


# --- member-only points ------------------------------------------------------------------------


HIT = "store1_tp-12r"


@pytest.mark.parametrize(("member", "enqueued"), [(False, 0), (True, 1)])
def test_member_only_points_count_only_for_a_device_that_says_it_is_a_member(
    yahoo, recording_channel, member, enqueued
):
    yahoo.add(HIT, price=1000)
    yahoo.points(HIT, amount=0, lyLimitedBonusAmount=10, lyLimitedPremiumBonusAmount=110)
    listing = ListingFactory(
        source="yahoo",
        item_code=HIT,
        price=1000,
        shipping=0,
        last_polled_at=NOW - dt.timedelta(hours=1),
    )
    made = WatchFactory(
        listing=listing,
        device=DeviceFactory(lyp_premium=member),
        target_price=900,
        after_points=True,
    )
    assert at(NOW, lambda: poll(codes=[HIT])).enqueued == enqueued, "¥990 for all, ¥890 for one"
    if member:
        at(NOW + dt.timedelta(minutes=5), run_cycle)
        row = Outbox.objects.get(watch=made)
        assert row.status == Status.SENT, (row.reason, row.detail)
        [(_, message)] = recording_channel.delivered
        assert "¥1,000 − 10 pt − 100 pt (LYP premium) = ¥890, free shipping" in message.body
        assert Outbox.objects.get(watch=made).status == Status.SENT


# --- product watches ------------------------------------------------------------------------


START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def test_a_product_watch_takes_the_cheapest_offer_after_points_whichever_shop(
    yahoo, recording_channel
):
    five_shops(yahoo)  # ¥620, ¥520, ¥550, ¥505 and ¥700; 1 % back each
    yahoo.points("store2_tp-12r", amount=0, lyLimitedBonusAmount=60)  # ¥520 − 60 = ¥460
    with time_machine.travel(START, tick=False):
        product = add_product(JAN)
    points = watch(product, target_price=480, after_points=True)
    sticker = watch(product, device=DeviceFactory(), target_price=480)
    assert points.listing.item_code == "store2_tp-12r", "followed from the start"
    assert sticker.listing.item_code == "store4_tp-12r", "¥505 incl. shipping"

    with time_machine.travel(START + dt.timedelta(minutes=20), tick=False):
        assert poll_products(force=True).enqueued == 1
    detected = Outbox.objects.get(watch=points).detected_payload
    assert (detected["item_code"], detected["net_price"]) == ("store2_tp-12r", 460)

    # Before the send, another shop's campaign makes it the cheapest after points.
    yahoo.points("store5_tp-12r", amount=0, lyLimitedBonusAmount=250)  # ¥700 − 250 = ¥450
    with time_machine.travel(START + dt.timedelta(minutes=21), tick=False):
        run_cycle()

    [(_, message)] = recording_channel.delivered
    assert message.price == 450
    assert "At ストア store5: ¥700 − 250 pt = ¥450, free shipping." in message.body
    assert Outbox.objects.get(watch=points).status == Status.SENT


def test_from_x_at_n_shops_counts_the_points(yahoo, client):
    five_shops(yahoo)
    yahoo.points("store2_tp-12r", amount=0, lyLimitedBonusAmount=60)
    with time_machine.travel(START, tick=False):
        product = add_product(JAN)
    page = client.get(f"/products/{product.pk}/").content.decode()
    assert "from ¥460 at 5 shops" in page
    assert "Cheapest now, at ストア store2:" in page
    home = client.get("/").content.decode()
    assert "from ¥460 at 5 shops" in home


def test_the_statistics_exist_after_points_as_for_the_price_incl_shipping():
    from tests.factories import with_history
    from watches.polling.history import refresh_stats

    listing = with_history(ListingFactory(price=1000, shipping=0), [1000] * 30, now=NOW)
    PricePoint.objects.filter(listing=listing).update(points=100)
    refresh_stats([listing.pk], NOW)
    listing.refresh_from_db()
    assert (listing.low_90, listing.low_90_net) == (1000, 900)
    assert (listing.typical_price, listing.typical_net) == (1000, 900)


@pytest.mark.parametrize(("after", "enqueued"), [(True, 1), (False, 0)])
def test_lowest_after_points_reads_the_90_day_low_after_points(
    listing, ichiba, recording_channel, after, enqueued
):
    from tests.factories import with_history

    with_history(listing, [1980] * 29 + [1950], now=NOW)  # kept before points were read
    WatchFactory(listing=listing, trigger=Trigger.LOWEST, target_price=None, after_points=after)
    ichiba.campaign(CODE, 5, *OPEN)  # ¥1,980 − 90 pt = ¥1,890, below the ¥1,950 low
    assert at(NOW, lambda: poll(codes=[CODE])).enqueued == enqueued


def test_the_admin_story_shows_the_breakdown_at_detection_and_at_each_attempt(
    listing, ichiba, recording_channel, admin_client
):
    made = after_points(listing)
    ichiba.campaign(CODE, 5, *OPEN)
    assert at(NOW + dt.timedelta(minutes=50), lambda: poll(codes=[CODE])).enqueued == 1
    at(dt.datetime(2026, 3, 19, 14, 1, tzinfo=JST), run_cycle)
    row = Outbox.objects.get(watch=made)

    html = admin_client.get(f"/admin/outbox/outbox/{row.pk}/change/").content.decode()
    assert (
        "¥1,980 − 90 pt (5×, until 3/19 13:59) = ¥1,890, free shipping (judged after points)"
        in html
    )
    assert "¥1,980 − 18 pt = ¥1,962, free shipping (judged after points)" in html
    assert "Points campaign ended" in html
