"""The outbox changelist and detail page, the domain's admin pages, and who may see them."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, OutboxEvent, Reason, Status
from outbox.reporting.paginator import CappedCount, CappedCountPaginator
from tests.factories import (
    DemoProductFactory,
    DeviceFactory,
    DispatchRunFactory,
    ListingFactory,
    OutboxEventFactory,
    OutboxFactory,
    SubscribedDeviceFactory,
    WatchFactory,
)
from tests.outbox_states import row_in

pytestmark = pytest.mark.django_db

CHANGELIST_URL = "/admin/outbox/outbox/"
NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)


def listed(client, query: str = "") -> list[int]:
    response = client.get(f"{CHANGELIST_URL}{query}")
    assert response.status_code == 200
    return sorted(row.pk for row in response.context["cl"].result_list)


# --- changelist ---------------------------------------------------------------------------


def test_changelist_columns(admin_client):
    """Few, narrow columns: the listing's name truncated with the whole name, the watch and
    the device in its tooltip; the channel in the trigger's."""
    row = row_in(Status.RETRY)
    row.watch.listing.name = (
        "スコッティ フラワーパック 3倍長持ち トイレットペーパー 12ロール ダブル"
    )
    row.watch.listing.save()
    response = admin_client.get(CHANGELIST_URL)
    html = response.content.decode()
    listing = row.watch.listing
    title = f"{listing.name} — watch #{row.watch_id}, device {row.device.short_id}"
    assert (
        f'<a class="ob-name" href="/admin/watches/listing/{listing.pk}/change/" title="{title}">'
        "スコッティ フラワーパック 3倍長持ち トイレットペー…</a>"
    ) in html
    assert '<span class="ob-badge ob-retry">Retrying</span>' in html
    assert f'<span class="ob-reason" title="{row.reason}">' in html
    headers = [str(h["text"]) for h in response.context["result_headers"]]
    assert headers[2:] == [  # after the checkbox and the id
        "listing",
        "trigger",
        "status",
        "reason",
        "retries",
        "detected",
        "next / done",
    ]


def test_changelist_never_counts_the_whole_table(admin_client):
    row_in(Status.PENDING)
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(CHANGELIST_URL)
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    outbox_counts = [sql for sql in counts if "outbox_outbox" in sql and "GROUP BY" not in sql]
    # the paginator's bounded count, and the overview's stuck rows (the `sending` rows only)
    assert all("LIMIT" in sql or "claimed_at" in sql for sql in outbox_counts), outbox_counts


def test_capped_paginator_counts_no_further_than_its_cap():
    watch = WatchFactory()
    for day in range(7):
        OutboxFactory(watch=watch, detected_at=timezone.now() - dt.timedelta(days=day))

    class SmallCap(CappedCountPaginator):
        cap = 5

    paginator = SmallCap(Outbox.objects.order_by("-id"), 2)
    assert paginator.count == 5 and isinstance(paginator.count, CappedCount)
    assert str(paginator.count) == "5+"
    assert paginator.num_pages == 3
    newest = list(Outbox.objects.order_by("-id").values_list("id", flat=True))
    assert [row.pk for row in paginator.page(2).object_list] == newest[2:4]
    exact = SmallCap(Outbox.objects.filter(id__in=newest[:3]).order_by("-id"), 2)
    assert exact.count == 3 and not exact.capped


def test_changelist_past_the_cap_says_so(admin_client):
    watch = WatchFactory()
    now = timezone.now()
    detections = [
        Detection(
            watch.pk,
            watch.device_id,
            watch.device.channel,
            watch.trigger,
            now - dt.timedelta(days=day),
        )
        for day in range(CappedCountPaginator.cap + 1)
    ]
    assert enqueue_many(detections) == CappedCountPaginator.cap + 1
    html = admin_client.get(CHANGELIST_URL, headers={"accept-language": "en"}).content.decode()
    assert "10,000+ outbox rows" in html  # the paginator
    assert "All 10,000+ selected" in html  # the action bar's select-across


def test_changelist_pages_keep_their_order_and_joins(admin_client, django_assert_max_num_queries):
    with time_machine.travel(NOW, tick=False):
        watch = WatchFactory()
        for day in range(150):
            OutboxFactory(watch=watch, detected_at=NOW - dt.timedelta(days=day))
        ids = list(Outbox.objects.order_by("-id").values_list("id", flat=True))
        response = admin_client.get(f"{CHANGELIST_URL}?p=3")
    assert [row.pk for row in response.context["cl"].result_list] == ids[100:]
    assert "150 outbox rows" in response.content.decode()


def test_filters(admin_client):
    with time_machine.travel(NOW, tick=False):
        due = row_in(Status.PENDING)
        waiting = row_in(Status.RETRY)  # next attempt in 5 minutes
        stuck = row_in(Status.SENDING, now=NOW - dt.timedelta(minutes=10))
        fresh = row_in(Status.SENDING)
        failed = row_in(Status.FAILED, reason=Reason.DELIVER_REJECTED)
        old_sent = row_in(Status.SENT, now=NOW - dt.timedelta(days=3))
        assert listed(admin_client, "?queue=due") == [due.pk]
        assert listed(admin_client, "?queue=waiting") == [waiting.pk]
        assert listed(admin_client, "?queue=stuck") == [stuck.pk]
        assert listed(admin_client, "?status__exact=sending") == sorted([stuck.pk, fresh.pk])
        assert listed(admin_client, "?reason__exact=deliver_rejected") == [failed.pk]
        assert old_sent.pk not in listed(admin_client, "?since=24h")
        assert old_sent.pk in listed(admin_client, "?since=7d")
        assert listed(admin_client, f"?channel__exact={due.channel}&trigger__exact={due.trigger}")
        # the detected-date filter's own "Today" link
        response = admin_client.get(CHANGELIST_URL, headers={"accept-language": "en"})
        (dates,) = [f for f in response.context["cl"].filter_specs if f.title == "detected at"]
        today = next(c for c in dates.choices(response.context["cl"]) if c["display"] == "Today")
        assert due.pk in listed(admin_client, today["query_string"])
        assert old_sent.pk not in listed(admin_client, today["query_string"])


def test_search_by_outbox_id_listing_name_and_item_code(admin_client):
    soap = row_in(Status.PENDING, watch=WatchFactory(listing=ListingFactory(name="白い石鹸 6個")))
    coffee = row_in(
        Status.SENT, watch=WatchFactory(listing=ListingFactory(item_code="cf-ucc-golden-1k"))
    )
    assert listed(admin_client, f"?q={soap.pk}") == [soap.pk]
    assert listed(admin_client, f"?q=%23{coffee.pk}") == [coffee.pk]
    assert listed(admin_client, "?q=石鹸") == [soap.pk]
    assert listed(admin_client, "?q=UCC-golden") == [coffee.pk]
    assert listed(admin_client, "?q=nothing-like-this") == []
    jan = row_in(Status.SENT, watch=WatchFactory(listing=ListingFactory(item_code="4901234567894")))
    assert listed(admin_client, "?q=4901234567894") == [jan.pk]
    assert listed(admin_client, f"?q=石鹸 %23{soap.pk}") == [soap.pk]
    assert listed(admin_client, f"?q=石鹸 %23{coffee.pk}") == []


# --- detail page --------------------------------------------------------------------------


@pytest.fixture
def storied_row() -> Outbox:
    """A row detected at ¥980, retried once after a network error, then sent at ¥990."""
    row = OutboxFactory.create(
        status=Status.SENT,
        reason=Reason.DELIVERED,
        detected_payload={"price": 980, "in_stock": True, "line": "1000"},
        sent_message={"title": "¥990 now", "body": "洗剤"},
        retry_count=1,
    )
    at = row.detected_at
    OutboxEventFactory(
        outbox=row, from_status="pending", to_status="sending", reason="claimed", at=at
    )
    OutboxEventFactory(
        outbox=row,
        from_status="sending",
        to_status="retry",
        reason="refetch_network",
        at=at + dt.timedelta(seconds=1),
        data={"fetch_error": "network", "detail": "timed out"},
    )
    OutboxEventFactory(
        outbox=row,
        from_status="retry",
        to_status="sending",
        reason="claimed",
        at=at + dt.timedelta(seconds=60),
    )
    OutboxEventFactory(
        outbox=row,
        from_status="sending",
        to_status="sent",
        reason="delivered",
        at=at + dt.timedelta(seconds=61),
        data={
            "message": {"title": "¥990 now"},
            "line": "1000",
            "value": "990",
            "fresh": {"price": 990, "in_stock": True},
        },
    )
    return row


def test_detail_page_tells_the_story(admin_client, storied_row):
    row = storied_row
    response = admin_client.get(f"{CHANGELIST_URL}{row.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    # the snapshot and each attempt, side by side, pretty-printed
    assert html.count('class="ob-attempt"') == 3  # detected + two attempts
    assert "Attempt 1" in html and "Attempt 2" in html
    assert "&quot;price&quot;: 980" in html and "&quot;price&quot;: 990" in html
    assert "&quot;fetch_error&quot;: &quot;network&quot;" in html
    # attempt keys come in reading order: the fresh value first
    second = html[html.index("Attempt 2") :]
    assert (
        second.index("fresh")
        < second.index("value")
        < second.index("line")
        < second.index("message")
    )
    # the timeline inline, every event
    assert response.context["inline_admin_formsets"][0].formset.queryset.count() == 4
    # links to the watch, the listing and the device
    listing = row.watch.listing
    assert f"/admin/watches/watch/{row.watch_id}/change/" in html
    assert f"/admin/watches/listing/{listing.pk}/change/" in html
    assert f"/admin/watches/device/{row.device_id}/change/" in html
    assert "¥990 now" in html  # the sent message


def test_detail_page_is_read_only(admin_client, storied_row):
    url = f"{CHANGELIST_URL}{storied_row.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert 'name="_save"' not in html
    assert 'name="status"' not in html and 'name="reason"' not in html
    assert admin_client.post(url, {"status": "pending"}).status_code == 403
    assert admin_client.get(f"{CHANGELIST_URL}add/").status_code == 403
    assert admin_client.post(f"{CHANGELIST_URL}{storied_row.pk}/delete/").status_code == 403
    storied_row.refresh_from_db()
    assert storied_row.status == Status.SENT
    assert OutboxEvent.objects.filter(outbox=storied_row).count() == 4


# --- the domain's pages -------------------------------------------------------------------


def test_listing_changelist_counts_live_watches_without_n_plus_1(
    admin_client, django_assert_max_num_queries
):
    for n in range(20):
        listing = ListingFactory()
        WatchFactory.create_batch(n % 3, listing=listing)
        WatchFactory(listing=listing, removed_at=timezone.now())  # not counted
    admin_client.get("/admin/watches/listing/")
    with django_assert_max_num_queries(6):
        response = admin_client.get("/admin/watches/listing/")
    counts = sorted(listing.live_watch_count for listing in response.context["cl"].result_list)
    assert counts == sorted(n % 3 for n in range(20))


def test_listing_polling_health(admin_client):
    now = timezone.now()
    healthy = ListingFactory(last_polled_at=now)
    failing = ListingFactory(
        last_polled_at=now - dt.timedelta(hours=1), last_error="server: 503", last_error_at=now
    )
    stale = ListingFactory(last_polled_at=now - dt.timedelta(hours=3))
    never = ListingFactory(last_polled_at=None)

    def names(query: str) -> set[str]:
        response = admin_client.get(f"/admin/watches/listing/{query}")
        return {listing.name for listing in response.context["cl"].result_list}

    assert names("?polling=error") == {failing.name}
    assert names("?polling=stale") == {failing.name, stale.name}
    assert names("?polling=never") == {never.name}
    assert names("?polling=ok") == {healthy.name}
    html = admin_client.get("/admin/watches/listing/").content.decode()
    assert "✖ failing" in html and "server: 503" in html and "never polled" in html


def test_device_subscription_state(admin_client, django_assert_max_num_queries):
    active = SubscribedDeviceFactory()
    gone = SubscribedDeviceFactory(push_active=False)
    none = DeviceFactory()
    WatchFactory.create_batch(2, device=active)

    def ids(query: str) -> set[int]:
        response = admin_client.get(f"/admin/watches/device/{query}")
        return {device.pk for device in response.context["cl"].result_list}

    assert ids("?subscription=active") == {active.pk}
    assert ids("?subscription=inactive") == {gone.pk}
    assert none.pk in ids("?subscription=none")
    with django_assert_max_num_queries(6):
        response = admin_client.get("/admin/watches/device/")
    counts = {device.pk: device.live_watch_count for device in response.context["cl"].result_list}
    assert counts[active.pk] == 2 and counts[gone.pk] == 0


def test_watch_changelist_states(admin_client):
    live = WatchFactory()
    paused = WatchFactory(paused=True)
    removed = WatchFactory(removed_at=timezone.now())
    for state, watch in (("live", live), ("paused", paused), ("removed", removed)):
        response = admin_client.get(f"/admin/watches/watch/?state={state}")
        assert [w.pk for w in response.context["cl"].result_list] == [watch.pk]


def test_demo_products_show_what_polling_last_saw(admin_client):
    DemoProductFactory(item_code="dp-moony-m-64", price=1500)
    ListingFactory(item_code="dp-moony-m-64", price=1680, product=False)
    response = admin_client.get("/admin/demo/demoproduct/")
    (product,) = response.context["cl"].result_list
    assert product.seen_price == 1680


# --- who may see any of it ----------------------------------------------------------------


def admin_urls() -> list[str]:
    row = row_in(Status.FAILED)
    run = DispatchRunFactory.create()
    listing = row.watch.listing
    return [
        "/admin/",
        "/admin/outbox/outbox/overview/",
        CHANGELIST_URL,
        f"{CHANGELIST_URL}?queue=stuck",
        f"{CHANGELIST_URL}{row.pk}/change/",
        "/admin/outbox/dispatchrun/",
        f"/admin/outbox/dispatchrun/{run.pk}/change/",
        "/admin/watches/listing/",
        f"/admin/watches/listing/{listing.pk}/change/",
        "/admin/watches/watch/",
        "/admin/watches/device/",
        "/admin/demo/demoproduct/",
    ]


@pytest.mark.parametrize("who", ["anonymous", "not staff"])
def test_everyone_but_staff_gets_the_login_page(client, who):
    if who == "not staff":
        client.force_login(User.objects.create_user("shopper", password="pw"))
    urls = admin_urls()
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/admin/login/"), url
        page = client.get(response["Location"])
        assert 'id="login-form"' in page.content.decode(), url
    # and the levers do nothing for them
    failed = Outbox.objects.get(status=Status.FAILED)
    response = client.post(
        CHANGELIST_URL, {"action": "requeue_rows", "_selected_action": [failed.pk]}
    )
    assert response["Location"].startswith("/admin/login/")
    failed.refresh_from_db()
    assert failed.status == Status.FAILED


def test_staff_without_outbox_permission_gets_no_overview(client):
    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    client.force_login(clerk)
    assert client.get("/admin/outbox/outbox/overview/").status_code == 403
    assert "Outbox overview" not in client.get("/admin/").content.decode()


def test_device_admin_hides_the_transfer_hash_and_edits_no_identity(admin_client):
    device = DeviceFactory(transfer_token_hash="f" * 64, transfer_expires_at=timezone.now())
    response = admin_client.get(f"/admin/watches/device/{device.pk}/change/")
    assert response.status_code == 200
    form_fields = set(response.context["adminform"].form.fields)
    assert "transfer_token_hash" not in form_fields
    assert {"token_hash", "transfer_expires_at", "push_endpoint"}.isdisjoint(form_fields)
    assert "f" * 64 not in response.content.decode()


# --- the listing admin, registered once by watches; the outbox links in ---------------------


def test_the_listing_admin_is_the_watches_one_and_links_to_its_notifications(admin_client):
    from django.contrib import admin as django_admin

    from watches.admin import ListingAdmin
    from watches.models import Listing

    assert type(django_admin.site._registry[Listing]) is ListingAdmin
    listing, other = ListingFactory(), ListingFactory()
    mine = row_in(Status.PENDING, watch=WatchFactory(listing=listing))
    row_in(Status.PENDING, watch=WatchFactory(listing=other))
    url = f"{CHANGELIST_URL}?listing={listing.pk}"
    changelist = admin_client.get("/admin/watches/listing/").content.decode()
    assert f'<a href="{url}">Notifications</a>' in changelist
    page = admin_client.get(f"/admin/watches/listing/{listing.pk}/change/").content.decode()
    assert f'<a href="{url}">Notifications</a>' in page
    assert listed(admin_client, f"?listing={listing.pk}") == [mine.pk]
    # the filter names its listing while it is set
    html = admin_client.get(url).content.decode()
    assert str(listing) in html


@pytest.mark.parametrize("value", ["abc", "-1", "99999999"])
def test_a_bad_listing_filter_lists_nothing_and_never_fails(admin_client, value):
    row_in(Status.PENDING)
    response = admin_client.get(f"{CHANGELIST_URL}?listing={value}")
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def full_width(number: int) -> str:
    return "".join(chr(ord("０") + int(digit)) for digit in str(number))


@pytest.mark.parametrize("query", ["?q={}", "?q=%23{}", "?listing={}"])
def test_only_ascii_digits_name_a_row_or_a_listing_and_others_never_fail(admin_client, query):
    """`"²".isdigit()` is true and `int("²")` raises; `int("１")` is 1. A search or a listing
    filter in other digits lists nothing, rather than a 500 or another row's notifications."""
    row = row_in(Status.PENDING)
    for value in ("²", full_width(row.pk), full_width(row.watch.listing_id)):
        assert listed(admin_client, query.format(quote(value))) == [], value


def test_json_in_the_detail_page_shows_times_in_tokyo(admin_client):
    row = OutboxFactory(
        detected_payload={"price": 980, "observed_at": "2026-03-10T03:00:00+00:00"},
        sent_message={"title": "¥980", "sent": "2026-03-10T15:30:00.123456+00:00"},
    )
    html = admin_client.get(f"{CHANGELIST_URL}{row.pk}/change/").content.decode()
    assert "2026-03-10T12:00:00+09:00" in html
    assert "2026-03-11T00:30:00.123456+09:00" in html  # past midnight in Tokyo
    assert "+00:00" not in html.split('id="content-main"')[1]


def test_read_only_history_pages_offer_no_add_edit_or_delete(admin_client):
    run = DispatchRunFactory()
    for url in ("/admin/outbox/dispatchrun/", f"/admin/outbox/dispatchrun/{run.pk}/change/"):
        html = admin_client.get(url).content.decode().split('id="content-main"')[1]
        assert "addlink" not in html and 'name="_save"' not in html and "deletelink" not in html
    assert admin_client.get("/admin/outbox/dispatchrun/add/").status_code == 403
    assert admin_client.post(f"/admin/outbox/dispatchrun/{run.pk}/delete/").status_code == 403


# --- branding --------------------------------------------------------------------------------


def test_the_admin_says_yasugoro_with_its_icon(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert "<title>Site administration | Yasugoro</title>" in html
    assert '<div id="site-name"><a href="/admin/">' in html and ">Yasugoro</a>" in html
    assert "Django administration" not in html
    assert 'rel="icon" href="/static/icon.svg"' in html


def test_favicon_ico_is_served_to_every_page(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    body = b"".join(response.streaming_content)
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO header
    assert response["Cache-Control"] == "public, max-age=86400"
    assert client.post("/favicon.ico").status_code == 405


def test_the_fast_result_rows_are_the_rows_django_would_render(admin_client):
    from django.contrib.admin.templatetags.admin_list import result_list

    from outbox.templatetags.outbox_admin import outbox_result_list

    for status in (Status.PENDING, Status.RETRY, Status.SENT, Status.DROPPED):
        row_in(status)
    response = admin_client.get(CHANGELIST_URL)
    cl = response.context["cl"]
    ours, django = outbox_result_list(cl), result_list(cl)
    assert [list(row) for row in ours["results"]] == [list(row) for row in django["results"]]
    assert ours["result_headers"] == django["result_headers"]
    assert len(ours["results"]) == 4
    assert 'class="action-select"' in response.content.decode()


def test_a_listing_filter_beyond_the_id_column_lists_nothing_and_never_fails(admin_client):
    """A number beyond a 64-bit id names no listing (on SQLite it overflowed the query)."""
    from outbox.models import Status
    from tests.factories import OutboxFactory

    OutboxFactory(status=Status.PENDING)
    response = admin_client.get("/admin/outbox/outbox/?listing=" + "9" * 20)
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []
