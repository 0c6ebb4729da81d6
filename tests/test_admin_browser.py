"""The outbox overview in a real browser: Debian's chromium through Playwright, against the
live server, logged in through the admin's login form. Screenshots go to `test-artifacts/`
(git-ignored) for people to look at."""

from __future__ import annotations

import datetime as dt
import random

from django.utils import timezone

from outbox.models import Reason, Status
from tests.browser import ARTIFACTS, BROWSER_MARKS
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


def test_overview_screenshot(staff_page, live_server):
    from playwright.sync_api import expect

    seed_a_month()
    page = staff_page
    ARTIFACTS.mkdir(exist_ok=True)

    page.goto(f"{live_server.url}/admin/")
    page.click("text=Outbox overview")
    page.wait_for_url("**/admin/outbox/outbox/overview/")
    assert page.locator(".ob-overview").is_visible()
    assert page.locator(".ob-chart svg rect").count() > 30
    page.screenshot(path=str(ARTIFACTS / "outbox-overview.png"), full_page=True)

    # a count in the overview leads to the rows it counts
    page.click("table.ob-counts >> text=Retrying")
    page.wait_for_url("**/admin/outbox/outbox/?status__exact=retry")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)

    page.set_viewport_size({"width": 1440, "height": 1400})
    page.goto(f"{live_server.url}/admin/outbox/outbox/")
    page.click("#toggle-nav-sidebar")  # room for the columns
    page.screenshot(path=str(ARTIFACTS / "outbox-changelist.png"))
    page.click("#result_list tbody tr >> nth=0 >> th a")
    expect(page.locator(".ob-attempts")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "outbox-detail.png"), full_page=True)
    assert (ARTIFACTS / "outbox-overview.png").stat().st_size > 10_000
