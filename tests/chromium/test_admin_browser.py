"""The admin in a real browser: Debian's chromium through Playwright, against the live
server, logged in through the admin's login form, in Japanese and in English, on a phone
(360×740) and a laptop (1280×800). Screenshots go to `test-artifacts/` (git-ignored) for
people to look at."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from outbox.models import Outbox, Reason, Status
from tests.browser import ARTIFACTS, BROWSER_MARKS, STAFF_PASSWORD, log_in
from tests.factories import DispatchRunFactory, OutboxEventFactory, OutboxFactory, WatchFactory

pytestmark = BROWSER_MARKS

MIX = [
    (Status.SENT, Reason.DELIVERED, 60),
    (Status.DROPPED, Reason.CONDITION_LOST, 12),
    (Status.DROPPED, Reason.ALREADY_NOTIFIED, 6),
    (Status.DROPPED, Reason.OUT_OF_STOCK, 4),
    (Status.DROPPED, Reason.NO_SUBSCRIPTION, 2),
    (Status.FAILED, Reason.DELIVER_SERVER, 2),
    (Status.FAILED, Reason.DELIVER_REJECTED, 1),
]


def seed_a_month() -> None:
    """About a month of outbox history, and a live queue."""
    rng = random.Random(5)
    now = timezone.now()
    watches = WatchFactory.create_batch(12)
    statuses = [(status, reason) for status, reason, weight in MIX for _ in range(weight)]
    for day in range(30):
        for watch in rng.sample(watches, rng.randrange(2, 12)):
            status, reason = rng.choice(statuses)
            moved = now - dt.timedelta(days=day, minutes=rng.randrange(1, 600))
            OutboxFactory(
                watch=watch,
                status=status,
                reason=reason,
                # one detection per watch and day, as the dedup index wants
                detected_at=now - dt.timedelta(days=day),
                updated_at=moved,
                sent_at=moved if status == Status.SENT else None,
            )
    live = WatchFactory.create_batch(4)
    OutboxFactory(watch=live[0], detected_at=now - dt.timedelta(minutes=7))
    OutboxFactory(
        watch=live[1],
        status=Status.RETRY,
        reason=Reason.REFETCH_RATE_LIMITED,
        detected_at=now - dt.timedelta(minutes=20),
        next_attempt_at=now + dt.timedelta(minutes=2),
    )
    OutboxFactory(
        watch=live[2],
        status=Status.SENDING,
        reason=Reason.CLAIMED,
        claimed_at=now - dt.timedelta(minutes=12),
        claimed_by="web-1:4242:9f2c1a0b7e3d",
    )
    story = OutboxFactory(
        watch=live[3],
        status=Status.SENT,
        reason=Reason.DELIVERED,
        sent_message={"title": "¥1,180 — 18 rolls", "body": "At or below your ¥1,200"},
    )
    OutboxEventFactory(
        outbox=story,
        to_status=Status.RETRY,
        reason=Reason.REFETCH_NETWORK,
        data={"fetch_error": "network", "detail": "connect timeout"},
    )
    OutboxEventFactory(
        outbox=story,
        data={
            "fresh": {"price": 1180, "in_stock": True},
            "value": "1180",
            "line": "1200",
            "message": {"title": "¥1,180 — 18 rolls"},
        },
    )
    DispatchRunFactory(started_at=now - dt.timedelta(seconds=40), claimed=3, sent=2, dropped=1)


PASSWORD = STAFF_PASSWORD
SIZES = {"phone": (360, 740), "laptop": (1280, 800)}


def fits(page) -> tuple[int, int]:
    return page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )


@pytest.mark.parametrize("lang", ["ja", "en"])
@pytest.mark.parametrize("size", ["phone", "laptop"])
def test_the_admin_fits_the_screen_in_both_languages(browser, live_server, lang, size):
    """Index, overview, changelist and a row's story, screenshotted; no page is wider than
    the screen, and at 1280 px the changelist's reason column is in view beside both the
    table and the filters."""
    from playwright.sync_api import expect

    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    seed_a_month()
    story = Outbox.objects.filter(events__isnull=False).order_by("-id").first()
    story.watch.listing.name = (
        "スコッティ フラワーパック 3倍長持ち トイレットペーパー 12ロール ダブル 無香料 まとめ買い"
    )
    story.watch.listing.save()
    width, _ = SIZES[size]
    page = log_in(browser, live_server, lang=lang, size=SIZES[size])
    ARTIFACTS.mkdir(exist_ok=True)
    words = {
        "ja": ("運用", "送信キューの概要", "状態別", "経過"),
        "en": ("Operations", "Outbox overview", "By status", "Timeline"),
    }[lang]
    pages = [
        ("index", "/admin/", words[0]),
        ("overview", "/admin/outbox/outbox/overview/", words[1]),
        ("changelist", "/admin/outbox/outbox/", words[2]),
        ("detail", f"/admin/outbox/outbox/{story.pk}/change/", words[3]),
    ]
    for name, url, word in pages:
        page.goto(f"{live_server.url}{url}")
        expect(page.locator("#content")).to_contain_text(word, ignore_case=True)
        assert page.locator("html").get_attribute("lang") == lang
        page.screenshot(path=str(ARTIFACTS / f"admin-{lang}-{width}-{name}.png"), full_page=True)
        scroll_width, client_width = fits(page)
        assert scroll_width <= client_width, f"{name} is {scroll_width} px wide at {width}"
        if name == "index":
            # the Operations row reads as words, never a letter per line
            for part in ("th", "td"):
                box = page.locator(f"#outbox-overview-link {part}").bounding_box()
                assert box["height"] < 60, (part, box)
        if name == "changelist" and size == "laptop":
            row = page.locator("#result_list tbody tr").first.bounding_box()
            assert row["height"] < 90, row  # no column squeezed to a letter per line
        if name == "changelist" and size == "laptop":
            header = page.locator("#result_list th.column-reason_col")
            cell = page.locator("#result_list td.field-reason_col").first
            for part in (header, cell):
                expect(part).to_be_visible()
                box = part.bounding_box()
                assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
            filters = page.locator("#changelist-filter").bounding_box()
            assert header.bounding_box()["x"] + header.bounding_box()["width"] <= filters["x"]
            # a long name is cut, the whole of it is the tooltip
            name_link = page.locator("#result_list a.ob-name", has_text="スコッティ").first
            assert "まとめ買い" in name_link.get_attribute("title")
            assert name_link.bounding_box()["height"] < 30  # one line
        if name == "detail":
            expect(page.locator(".ob-timeline li")).to_have_count(story.events.count())
            for block in page.locator("pre.ob-json").all():
                box = block.bounding_box()
                assert box["x"] + box["width"] <= width, box


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_the_changelist_on_a_phone_reads_each_row_without_scrolling_sideways(
    browser, live_server, lang
):
    """At 360 px each row is a card: its status, reason and times are on the screen, each
    time named by its column, and the list has nothing to scroll sideways."""
    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    seed_a_month()
    page = log_in(browser, live_server, lang=lang, size=SIZES["phone"])
    page.goto(f"{live_server.url}/admin/outbox/outbox/")
    results = page.locator("#changelist .results")
    scroll_width, client_width = results.evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert scroll_width <= client_width, f"the list scrolls sideways: {scroll_width}"
    labels = {
        "ja": ("検出", "次回／完了"),
        "en": ("detected", "next / done"),
    }[lang]
    rows = page.locator("#result_list tbody tr")
    for index in range(5):
        row = rows.nth(index)
        for column in ("status_col", "reason_col", "detected", "next_or_done"):
            cell = row.locator(f"td.field-{column}")
            box = cell.bounding_box()
            assert box is not None and box["width"] > 0, (index, column)
            assert box["x"] >= 0 and box["x"] + box["width"] <= 360, (index, column, box)
        for column, label in zip(("detected", "next_or_done"), labels, strict=True):
            assert row.locator(f"td.field-{column}").inner_text().startswith(label), column
        time = row.locator("td.field-detected")
        line = float(time.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
        assert time.bounding_box()["height"] < 1.6 * line, "a time on one line"
    ARTIFACTS.mkdir(exist_ok=True)
    rows.first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"admin-{lang}-360-changelist-rows.png"))


def test_overview_counts_lead_to_the_rows_they_count(browser, live_server):
    from playwright.sync_api import expect

    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    seed_a_month()
    page = log_in(browser, live_server, lang="en", size=(1280, 900))
    page.click("text=Outbox overview")
    page.wait_for_url("**/admin/outbox/outbox/overview/")
    assert page.locator(".ob-chart svg rect").count() > 30
    page.click("table.ob-counts >> text=Retrying")
    page.wait_for_url("**/admin/outbox/outbox/?status__exact=retry")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)


def test_staff_switch_the_admin_language(browser, live_server):
    from playwright.sync_api import expect

    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    page = log_in(browser, live_server, lang="en", size=(1280, 800))
    expect(page.locator("#content h1")).to_have_text("Site administration")
    page.click(".ob-lang button[lang=ja]")
    expect(page.locator("#content h1")).to_have_text("サイト管理")
    expect(page.locator(".ob-lang button[lang=ja]")).to_be_disabled()


def test_staff_resume_a_paused_listing_and_it_is_asked_for_first(browser, live_server):
    from playwright.sync_api import expect

    from tests.factories import ListingFactory
    from watches.models import Listing

    User.objects.create_superuser("ops", "ops@example.test", PASSWORD)
    listing = ListingFactory(paused=True, last_polled_at=timezone.now() - dt.timedelta(hours=2))
    page = log_in(browser, live_server, lang="en", size=(1280, 900))
    page.goto(f"{live_server.url}/admin/watches/listing/{listing.pk}/change/")
    page.uncheck("#id_paused")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/watches/listing/")
    expect(page.locator(".messagelist .success")).to_have_count(1)
    listing = Listing.objects.get(pk=listing.pk)
    assert (listing.paused, listing.last_polled_at) == (False, None)
