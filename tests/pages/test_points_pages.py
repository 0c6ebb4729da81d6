"""The pages say the price after points beside the price: the listing's facts and chart, the
home page's rows, the watch form (after points by default where the marketplace gives
points), My watches, and the settings' word on member-only points."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

import pytest
import time_machine

from tests.factories import ListingFactory, WatchFactory, device_with_cookie
from watches.models import Channel, Device, PricePoint, Trigger, Watch
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

JST = zoneinfo.ZoneInfo("Asia/Tokyo")
NOW = dt.datetime(2026, 3, 19, 13, 0, tzinfo=JST)
CODE = "yasu-shop:tp-12r"


@pytest.fixture
def campaign(ichiba):
    """A Rakuten listing at ¥1,980, free shipping, polled in its 5× campaign (until 3/19
    13:59): ¥1,980 − 90 pt = ¥1,890."""
    ichiba.add(CODE, price=1980)
    ichiba.campaign(CODE, 5, "2026-03-13 19:00", "2026-03-19 13:59")
    listing = ListingFactory(
        source="rakuten", item_code=CODE, price=1980, last_polled_at=NOW - dt.timedelta(hours=1)
    )
    with time_machine.travel(NOW, tick=False):
        poll(codes=[CODE])
    listing.refresh_from_db()
    return listing


def page(client, path: str, at: dt.datetime = NOW, lang: str = "en") -> str:
    with time_machine.travel(at + dt.timedelta(minutes=1), tick=False):
        return client.get(path, HTTP_ACCEPT_LANGUAGE=lang).content.decode()


def test_the_listing_page_says_the_price_after_points_and_its_breakdown(client, campaign):
    html = page(client, f"/listings/{campaign.pk}/")
    assert "Now, after points" in html and "¥1,890" in html
    assert '<span class="term">− 90 pt (5×, until 3/19 13:59)</span>' in html
    assert '<span class="term">= ¥1,890</span>' in html and "free shipping" in html
    assert "Price incl. shipping" in html and "¥1,980" in html
    # The chart draws both lines when points were given.
    assert 'class="net-line"' in html and "Lowest after points" in html


def test_the_listing_page_in_japanese(client, campaign):
    html = page(client, f"/listings/{campaign.pk}/", lang="ja")
    assert "現在（ポイント還元後）" in html
    assert "− 90ポイント（5倍・3/19 13:59まで）" in html
    assert "＝ 実質¥1,890" in html and "送料無料" in html


def test_once_the_campaign_has_ended_the_page_says_so_and_counts_what_is_left(client, campaign):
    html = page(client, f"/listings/{campaign.pk}/", at=dt.datetime(2026, 3, 19, 14, 5, tzinfo=JST))
    assert "5× ended 3/19 13:59" in html
    assert "¥1,962" in html and "until 3/19 13:59)" not in html, "18 pt, the standard, is left"


@pytest.mark.parametrize("path", ["listing", "/"])
def test_a_page_cached_during_the_campaign_is_not_shown_after_it_ends(client, campaign, path):
    path = f"/listings/{campaign.pk}/" if path == "listing" else path
    during = page(client, path, at=dt.datetime(2026, 3, 19, 13, 54, tzinfo=JST))
    assert "¥1,890" in during  # a first visitor's page, now in the cache
    assert "until 3/19 13:59)" in during
    after = page(client, path, at=dt.datetime(2026, 3, 19, 14, 2, tzinfo=JST))
    assert "until 3/19 13:59)" not in after and "¥1,962" in after, "18 pt, the standard, left"


def test_the_home_page_row_shows_the_price_after_points(client, campaign):
    html = page(client, "/")
    assert '<span class="price">¥1,890</span> <span class="unit">after points</span>' in html


def test_the_watch_form_counts_the_points_by_default_where_the_marketplace_gives_them(
    client, campaign
):
    html = page(client, f"/listings/{campaign.pk}/")
    assert 'name="after_points"' in html and "checked" in html.split('name="after_points"')[1][:80]
    with time_machine.travel(NOW + dt.timedelta(minutes=1), tick=False):
        client.post(
            f"/listings/{campaign.pk}/",
            {"trigger": Trigger.TARGET_PRICE, "target_price": "1900", "after_points": "on"},
        )
        client.post(f"/listings/{campaign.pk}/", {"trigger": Trigger.LOWEST, "drop_percent": "15"})
    by_trigger = dict(Watch.objects.values_list("trigger", "after_points"))
    assert by_trigger == {Trigger.TARGET_PRICE: True, Trigger.LOWEST: False}, "unticked: not"


def test_my_watches_says_what_each_watch_compares_and_the_breakdown(client, campaign):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    WatchFactory(device=device, listing=campaign, target_price=1900, after_points=True)
    WatchFactory(device=device, listing=campaign, trigger=Trigger.LOWEST, target_price=None)
    html = page(client, "/watches/")
    assert "· after points and shipping" in html and "· price incl. shipping" in html
    assert "Now, after points" in html
    assert '<span class="term">− 90 pt (5×, until 3/19 13:59)</span>' in html
    assert "At or below your line now" in html, "¥1,890 is at or below ¥1,900"


def test_changing_what_a_watch_compares_clears_its_baseline(client, campaign):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    made = WatchFactory(
        device=device,
        listing=campaign,
        target_price=1900,
        last_notified_price=1890,
        last_notified_at=NOW,
        last_notified_detected_at=NOW,
    )
    with time_machine.travel(NOW, tick=False):
        client.post(
            f"/watches/{made.pk}/edit/",
            {"trigger": Trigger.TARGET_PRICE, "target_price": "1900", "after_points": "on"},
        )
    made.refresh_from_db()
    assert made.after_points is True and made.last_notified_price is None


def test_the_settings_say_whether_member_only_points_count(client):
    device, _ = device_with_cookie(client)
    html = client.get("/settings/").content.decode()
    assert "Points only some members get are shown, not counted." in html
    client.post("/settings/points", {"lyp_premium": "on"})
    assert Device.objects.get(pk=device.pk).lyp_premium is True
    assert (
        "also count the points only LYP premium members get"
        in client.get("/settings/").content.decode()
    )
    client.post("/settings/points", {})
    assert Device.objects.get(pk=device.pk).lyp_premium is False


def test_member_only_points_are_shown_and_not_counted(client, yahoo):
    yahoo.add("store1_tp-12r", price=1000)
    yahoo.points(
        "store1_tp-12r", amount=0, lyLimitedBonusAmount=10, lyLimitedPremiumBonusAmount=110
    )
    listing = ListingFactory(
        source="yahoo", item_code="store1_tp-12r", last_polled_at=NOW - dt.timedelta(hours=1)
    )
    with time_machine.travel(NOW, tick=False):
        poll(codes=["store1_tp-12r"])
    html = page(client, f"/listings/{listing.pk}/")
    assert "¥990" in html
    assert "(+100 pt for LYP premium members, not counted)" in html


def test_a_history_kept_before_points_were_read_counts_none(campaign):
    PricePoint.objects.create(
        listing=campaign,
        observed_at=NOW - dt.timedelta(days=1),
        price=1980,
        shipping=0,
        in_stock=True,
    )
    assert PricePoint.objects.get(observed_at=NOW - dt.timedelta(days=1)).net_price == 1980


def text_of(html: str) -> str:
    """The page's words, tags left out, spaces folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.parametrize(
    ("lang", "label", "unit", "sticker"),
    [
        ("en", "Unit price after points", "¥157.50 per roll", "¥165.00 per roll"),
        ("ja", "ポイント還元後の単価", "1ロールあたり¥157.50", "¥165.00"),
    ],
)
def test_the_listing_page_says_the_unit_price_after_points(
    client, campaign, lang, label, unit, sticker
):
    """(¥1,980 − 90 pt) / 12 rolls = ¥157.50 a roll, not the sticker's ¥165.00."""
    words = text_of(page(client, f"/listings/{campaign.pk}/", lang=lang))
    assert f"{label} {unit}" in words, words
    assert sticker not in words


def test_my_watches_judges_a_unit_watch_after_points_on_the_unit_price_after_points(
    client, campaign
):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    WatchFactory(
        device=device, listing=campaign, target_price=160, use_unit_price=True, after_points=True
    )
    words = text_of(page(client, "/watches/"))
    assert "Now, after points ¥157.50 per roll" in words, words
    assert "¥165.00" not in words
