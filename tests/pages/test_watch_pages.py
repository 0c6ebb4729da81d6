"""Watching from the pages: the watch form on the listing page, My watches (edit, pause,
resume, remove, undo), and every way a form can be wrong — each told next to its field, each
changing nothing, none a 500."""

from __future__ import annotations

import datetime as dt
import html
import re
import threading
import time
from typing import Literal

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from outbox.models import Reason, Status
from tests import factories
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, device_with_cookie
from tests.outbox_helpers import enqueue_for
from watches.devices import cookie_name, hash_token
from watches.models import Device, Listing, PricePoint, Trigger, Watch

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
# Text without lone surrogates (Unicode category Cs): no browser can send one in a form.
NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def with_history(listing, prices: list[int | None]):
    return factories.with_history(listing, prices, now=NOW)


@pytest.fixture
def listing():
    return with_history(
        ListingFactory(price=1000, units_per_pack=12, unit_label="roll"), [1000] * 30 + [900] * 10
    )


def watch_state() -> list[tuple]:
    """Every watch row, all fields that matter: "changes nothing" compares these."""
    return list(
        Watch.objects.order_by("pk").values_list(
            "pk",
            "device_id",
            "listing_id",
            "trigger",
            "target_price",
            "drop_percent",
            "use_unit_price",
            "paused",
            "removed_at",
            "last_notified_price",
            "updated_at",
        )
    )


def post_watch(client, listing, **data):
    return client.post(reverse("listing", args=[listing.pk]), data)


def field_error(response, field: str) -> str:
    """The text of the error list rendered right at `field` (Django's `<ul id=…_error>`)."""
    body = response.content.decode()
    match = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', body, re.S)
    assert match, f"no error rendered next to {field}"
    assert f'aria-describedby="id_{field}_error' in body or f'id_{field}_error"' in body
    return html.unescape(re.sub(r"<[^>]+>", " ", match[1])).strip()


# --- Creating a watch ----------------------------------------------------------------------


def test_a_target_price_watch_is_created_with_the_device_and_its_cookie(client, listing):
    response = post_watch(client, listing, trigger="target_price", target_price="950")
    assert response.status_code == 302
    assert response["Location"] == f"/listings/{listing.pk}/#your-watches"
    device = Device.objects.get()
    assert device.token_hash == hash_token(response.cookies[cookie_name()].value)
    assert response.cookies[cookie_name()]["httponly"]
    watch = Watch.objects.get()
    assert (watch.device, watch.listing, watch.trigger, watch.target_price) == (
        device,
        listing,
        Trigger.TARGET_PRICE,
        950,
    )
    assert watch.drop_percent is None and not watch.use_unit_price


def test_the_listing_page_shows_the_watch_and_the_target_line(client, listing):
    post_watch(client, listing, trigger="target_price", target_price="950")
    body = client.get(reverse("listing", args=[listing.pk])).content.decode()
    assert "You are watching this" in body
    assert "At or below ¥950" in body
    assert 'class="mark-target"' in body
    assert "Your target ¥950" in body


def test_a_per_unit_target_is_drawn_as_a_pack_price(client, listing):
    post_watch(client, listing, trigger="target_price", target_price="70", use_unit_price="on")
    watch = Watch.objects.get()
    assert watch.use_unit_price and watch.target_price == 70
    body = client.get(reverse("listing", args=[listing.pk])).content.decode()
    assert "At or below ¥70 per roll" in body
    assert "Your target ¥840" in body, "70 per roll × 12 rolls"


def test_no_target_line_for_someone_else_or_nobody(client, listing):
    WatchFactory(listing=listing, target_price=950)
    assert 'class="mark-target"' not in client.get(f"/listings/{listing.pk}/").content.decode()


def test_the_other_triggers_and_their_parameters(client, listing):
    post_watch(client, listing, trigger="price_drop", drop_percent="20", target_price="junk")
    post_watch(client, listing, trigger="lowest", target_price="5", drop_percent="999")
    post_watch(client, listing, trigger="back_in_stock")
    rows = {w.trigger: w for w in Watch.objects.all()}
    assert (rows["price_drop"].drop_percent, rows["price_drop"].target_price) == (20, None)
    assert (rows["lowest"].target_price, rows["lowest"].drop_percent) == (None, None)
    assert rows["back_in_stock"].target_price is None
    assert Device.objects.count() == 1, "one browser, one device"


def test_the_drop_defaults_to_15_percent_on_the_form(client, listing):
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert re.search(r'name="drop_percent" value="15"', body)


def test_back_in_stock_may_have_a_target(client, listing):
    post_watch(client, listing, trigger="back_in_stock", target_price="800")
    assert Watch.objects.get().target_price == 800


def test_choosing_the_same_trigger_again_changes_that_watch(client, listing):
    post_watch(client, listing, trigger="target_price", target_price="950")
    post_watch(client, listing, trigger="target_price", target_price="900")
    assert list(Watch.objects.values_list("target_price", flat=True)) == [900]


def test_target_below_the_90_day_low_is_told_before_and_after(client, listing):
    assert listing.low_90 == 900
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "Lowest in the last 90 days: ¥900 (¥75 per roll)." in body, "next to the field"
    assert "data-msg-below-pack=" in body, "the live hint's words, for watch-form.js"
    response = post_watch(client, listing, trigger="target_price", target_price="850")
    body = client.get(response["Location"]).content.decode()
    assert "Your price ¥850 is below the lowest price of the last 90 days (¥900)" in body


def test_a_per_unit_target_is_compared_with_the_per_unit_low(client, listing):
    post_watch(client, listing, trigger="target_price", target_price="74", use_unit_price="on")
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "below the lowest price of the last 90 days (¥75 per roll)" in body


def test_a_target_already_met_says_a_notification_is_coming(client, listing):
    device_with_cookie(client, push_endpoint="https://fcm.googleapis.com/x", push_active=True)
    post_watch(client, listing, trigger="target_price", target_price="1200")
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "at or below your price: expect a notification after the next price check" in body


def test_the_unit_price_box_is_offered_only_with_units_per_pack(client):
    with_units = ListingFactory(units_per_pack=12, unit_label="roll")
    without = ListingFactory(units_per_pack=None, unit_label="")
    assert 'name="use_unit_price"' in client.get(f"/listings/{with_units.pk}/").content.decode()
    assert 'name="use_unit_price"' not in client.get(f"/listings/{without.pk}/").content.decode()
    post_watch(client, without, trigger="target_price", target_price="900", use_unit_price="on")
    assert Watch.objects.get().use_unit_price is False


def test_a_paused_listing_cannot_be_watched(client, listing):
    listing.paused = True
    listing.save()
    response = post_watch(client, listing, trigger="target_price", target_price="900")
    assert response.status_code == 200
    assert "We no longer track this item" in response.content.decode()
    assert Watch.objects.count() == 0 and Device.objects.count() == 0


# --- Invalid input: a message next to the field, nothing changed --------------------------


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"trigger": "target_price", "target_price": "-100"}, "target_price", "more than ¥0"),
        ({"trigger": "target_price", "target_price": "0"}, "target_price", "more than ¥0"),
        (
            {"trigger": "target_price", "target_price": "10000001"},
            "target_price",
            "more than ¥10,000,000",
        ),
        (
            {"trigger": "target_price", "target_price": "99999999999999999999"},
            "target_price",
            "more than ¥10,000,000",
        ),
        ({"trigger": "target_price", "target_price": "abc"}, "target_price", "whole number of yen"),
        ({"trigger": "target_price", "target_price": "12.5"}, "target_price", "without decimals"),
        ({"trigger": "target_price", "target_price": "1e3"}, "target_price", "whole number of yen"),
        ({"trigger": "target_price", "target_price": "NaN"}, "target_price", "whole number of yen"),
        (
            {"trigger": "target_price", "target_price": "1" * 40},
            "target_price",
            "whole number of yen",
        ),
        ({"trigger": "target_price", "target_price": ""}, "target_price", "Enter the price"),
        ({"trigger": "target_price"}, "target_price", "Enter the price"),
        ({"trigger": "back_in_stock", "target_price": "-5"}, "target_price", "more than ¥0"),
        ({"trigger": "price_drop", "drop_percent": "0"}, "drop_percent", "from 1 to 90"),
        ({"trigger": "price_drop", "drop_percent": "91"}, "drop_percent", "from 1 to 90"),
        ({"trigger": "price_drop", "drop_percent": "-15"}, "drop_percent", "from 1 to 90"),
        (
            {"trigger": "price_drop", "drop_percent": "fifteen"},
            "drop_percent",
            "whole number from 1 to 90",
        ),
        (
            {"trigger": "price_drop", "drop_percent": "15.5"},
            "drop_percent",
            "whole number from 1 to 90",
        ),
        ({"trigger": "price_drop", "drop_percent": ""}, "drop_percent", "how big a drop"),
        (
            {"trigger": "cheapest_ever", "target_price": "900"},
            "trigger",
            "Choose one of the listed",
        ),
        ({"trigger": "", "target_price": "900"}, "trigger", "Choose when"),
        ({"target_price": "900"}, "trigger", "Choose when"),
    ],
)
def test_invalid_input_is_told_next_to_its_field_and_changes_nothing(
    client, listing, data, field, message
):
    device, _ = device_with_cookie(client)
    existing = WatchFactory(device=device, listing=listing, target_price=950)
    before = watch_state()
    response = post_watch(client, listing, **data)
    assert response.status_code == 200
    assert message in field_error(response, field)
    assert 'aria-invalid="true"' in response.content.decode()
    assert watch_state() == before
    # The edit form says the same about the same input.
    response = client.post(reverse("watch-edit", args=[existing.pk]), data)
    assert response.status_code == 200
    assert message in field_error(response, field)
    assert watch_state() == before


def test_invalid_input_creates_no_device_either(client, listing):
    post_watch(client, listing, trigger="target_price", target_price="-1")
    assert Device.objects.count() == 0
    assert cookie_name() not in client.cookies


@pytest.mark.parametrize(
    "text", ["1,280", "¥1,280", "￥１，２８０", "１２８０", "1280円", " 1280 "]
)
def test_prices_are_read_as_people_type_them(client, listing, text):
    post_watch(client, listing, trigger="target_price", target_price=text)
    assert Watch.objects.get().target_price == 1280


def test_a_tampered_listing_id_is_404_and_changes_nothing(client, listing):
    device_with_cookie(client)
    before = watch_state()
    for listing_id in (listing.pk + 1000, 0):
        response = client.post(
            f"/listings/{listing_id}/", {"trigger": "target_price", "target_price": "900"}
        )
        assert response.status_code == 404
    assert client.post("/listings/-1/", {"trigger": "lowest"}).status_code == 404
    assert client.post("/listings/abc/", {"trigger": "lowest"}).status_code == 404
    assert watch_state() == before


def test_the_watch_form_needs_csrf(listing):
    browser = Client(enforce_csrf_checks=True)
    response = browser.post(f"/listings/{listing.pk}/", {"trigger": "lowest"})
    assert response.status_code == 403
    assert Watch.objects.count() == 0


@hsettings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    trigger=st.one_of(st.sampled_from([t.value for t in Trigger]), st.text(max_size=30)),
    target=st.text(alphabet=st.characters(exclude_categories=NO_SURROGATES), max_size=40),
    drop=st.text(alphabet=st.characters(exclude_categories=NO_SURROGATES), max_size=12),
    unit=st.one_of(st.none(), st.text(max_size=5)),
)
def test_no_input_makes_the_watch_form_fail(client, listing, trigger, target, drop, unit):
    data = {"trigger": trigger, "target_price": target, "drop_percent": drop}
    if unit is not None:
        data["use_unit_price"] = unit
    response = post_watch(client, listing, **data)
    assert response.status_code in (200, 302)
    if response.status_code == 200:
        assert "errorlist" in response.content.decode()
    for watch in Watch.objects.filter(listing=listing):
        assert watch.target_price is None or 0 < watch.target_price <= 10_000_000
        assert watch.drop_percent is None or 1 <= watch.drop_percent <= 90


# --- My watches ---------------------------------------------------------------------------


def test_my_watches_lists_the_live_watches_with_price_against_line(client, listing):
    device, _ = device_with_cookie(client)
    WatchFactory(device=device, listing=listing, target_price=950)
    WatchFactory(
        device=device,
        listing=listing,
        trigger=Trigger.PRICE_DROP,
        target_price=None,
        drop_percent=20,
    )
    WatchFactory(device=device, listing=listing, target_price=777, removed_at=NOW)
    WatchFactory(listing=listing, target_price=666)  # someone else's
    body = client.get("/watches/").content.decode()
    assert body.count('class="card watch-row') == 2
    assert "At or below ¥950" in body and "20% or more below its typical price" in body
    assert "¥50 to go." in body, "now ¥1,000 against ¥950"
    assert "¥800 or less" in body, "20 % below the typical ¥1,000"
    assert "¥777" not in body and "¥666" not in body


def test_my_watches_always_shows_push_status_and_the_button(client):
    body = client.get("/watches/").content.decode()
    assert 'id="push-settings"' in body and "data-push-toggle" in body
    assert "Push notifications are off for this browser." in body
    assert "/static/js/push.js" in body
    assert "You are not watching anything yet." in body


def test_the_nav_links_every_page(client):
    body = client.get("/").content.decode()
    for url in ("/", "/watches/", "/notifications/", "/settings/"):
        assert f'href="{url}"' in body


def test_edit_changes_the_watch(client, listing):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=listing, target_price=950)
    form = client.get(f"/watches/{watch.pk}/edit/").content.decode()
    assert 'value="950"' in form
    response = client.post(
        f"/watches/{watch.pk}/edit/", {"trigger": "target_price", "target_price": "900"}
    )
    assert response.status_code == 302 and response["Location"] == f"/watches/#watch-{watch.pk}"
    watch.refresh_from_db()
    assert watch.target_price == 900


def test_edit_keeps_the_baseline_for_a_new_number_and_clears_it_for_a_new_trigger(client, listing):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(
        device=device,
        listing=listing,
        target_price=950,
        last_notified_price=940,
        last_notified_at=NOW,
    )
    client.post(f"/watches/{watch.pk}/edit/", {"trigger": "target_price", "target_price": "900"})
    watch.refresh_from_db()
    assert watch.last_notified_price == 940
    client.post(f"/watches/{watch.pk}/edit/", {"trigger": "price_drop", "drop_percent": "10"})
    watch.refresh_from_db()
    assert (watch.trigger, watch.last_notified_price, watch.last_notified_at) == (
        "price_drop",
        None,
        None,
    )


def test_edit_refuses_a_second_watch_of_the_same_kind(client, listing):
    device, _ = device_with_cookie(client)
    WatchFactory(device=device, listing=listing, trigger=Trigger.LOWEST, target_price=None)
    watch = WatchFactory(device=device, listing=listing, target_price=950)
    before = watch_state()
    response = client.post(f"/watches/{watch.pk}/edit/", {"trigger": "lowest"})
    assert "already have a watch of this kind" in field_error(response, "trigger")
    assert watch_state() == before


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_double_submitted_watch_form_makes_one_watch():
    """Two submits at once (a double click) both read "no live watch yet" and would both
    insert: the device's row lock makes the second find the first's watch and change it."""
    listing = ListingFactory(price=1000)
    _, token = device_with_cookie(
        push_endpoint="https://fcm.googleapis.com/fcm/send/x", push_active=True
    )
    answers, errors = [], []

    def submit() -> None:
        browser = Client()
        browser.cookies[cookie_name()] = token
        try:
            response = browser.post(
                f"/listings/{listing.pk}/", {"trigger": "target_price", "target_price": "900"}
            )
            answers.append(response.status_code)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    # Both submits in flight at once: while the test holds the listing's row, a submit that
    # decided no watch exists yet waits at its insert (the new watch's foreign key).
    threads = [threading.Thread(target=submit) for _ in range(2)]
    with transaction.atomic():
        Listing.objects.select_for_update().get(pk=listing.pk)
        for thread in threads:
            thread.start()
        with connection.cursor() as cursor:
            for _ in range(600):
                cursor.execute("SELECT pg_stat_clear_snapshot()")
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                if cursor.fetchone()[0] >= 2:
                    break
                time.sleep(0.05)
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and answers == [302, 302]
    assert Watch.live.filter(listing=listing, trigger=Trigger.TARGET_PRICE).count() == 1


def test_pause_and_resume(client, listing):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=listing)
    client.post(f"/watches/{watch.pk}/pause", {"paused": "1"})
    watch.refresh_from_db()
    assert watch.paused
    assert "Paused: nothing is sent until you resume." in client.get("/watches/").content.decode()
    client.post(f"/watches/{watch.pk}/pause", {"paused": "0"})
    watch.refresh_from_db()
    assert not watch.paused


def test_remove_is_a_soft_delete_with_an_undo(client, listing):
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=listing)
    response = client.post(f"/watches/{watch.pk}/remove")
    assert response["Location"] == f"/watches/?removed={watch.pk}"
    watch.refresh_from_db()
    assert watch.removed_at == NOW
    body = client.get(response["Location"]).content.decode()
    assert "Removed your watch on" in body and f"/watches/{watch.pk}/restore" in body
    assert 'class="card watch-row' not in body
    client.post(f"/watches/{watch.pk}/restore")
    watch.refresh_from_db()
    assert watch.removed_at is None


def test_a_pending_notification_of_a_removed_watch_is_dropped_watch_removed(
    client, listing, recording_channel
):
    device, _ = device_with_cookie(client, channel="console")
    watch = WatchFactory(device=device, listing=listing, target_price=1200)
    row = enqueue_for(watch, price=1000)
    client.post(f"/watches/{watch.pk}/remove")
    call_command("dispatch_outbox")
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.WATCH_REMOVED)
    assert recording_channel.delivered == []
    assert "You removed this watch." in client.get("/notifications/").content.decode()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/watches/{id}/edit/"),
        ("post", "/watches/{id}/edit/"),
        ("post", "/watches/{id}/pause"),
        ("post", "/watches/{id}/remove"),
        ("post", "/watches/{id}/restore"),
    ],
)
def test_a_watch_of_another_device_is_404_and_untouched(client, listing, method, path):
    device_with_cookie(client)
    theirs = WatchFactory(device=DeviceFactory(), listing=listing, target_price=950)
    gone = WatchFactory(device=theirs.device, listing=listing, removed_at=NOW)
    before = watch_state()
    data = {"trigger": "target_price", "target_price": "1", "paused": "1"}
    for watch in (theirs, gone):
        response = getattr(client, method)(path.format(id=watch.pk), data)
        assert response.status_code == 404
    assert getattr(client, method)(path.format(id=999999), data).status_code == 404
    assert watch_state() == before
    # Without any cookie: the same.
    assert getattr(Client(), method)(path.format(id=theirs.pk), data).status_code == 404


def test_removed_watch_in_the_undo_link_must_be_ones_own(client, listing):
    device_with_cookie(client)
    theirs = WatchFactory(listing=listing, removed_at=NOW)
    for value in (str(theirs.pk), "abc", "9" * 40, "-1"):
        body = client.get("/watches/", {"removed": value}).content.decode()
        assert "Removed your watch on" not in body


def test_watch_changes_need_post_and_csrf(listing):
    browser = Client(enforce_csrf_checks=True)
    device, _token = device_with_cookie(browser)
    watch = WatchFactory(device=device, listing=listing)
    assert browser.get(f"/watches/{watch.pk}/remove").status_code == 405
    assert browser.post(f"/watches/{watch.pk}/remove").status_code == 403
    assert browser.post(f"/watches/{watch.pk}/pause").status_code == 403
    watch.refresh_from_db()
    assert watch.removed_at is None and not watch.paused


# --- Escaping and queries -----------------------------------------------------------------


def test_listing_names_are_escaped_on_the_watch_pages(client):
    listing = with_history(
        ListingFactory(name='<script>alert("x")</script>洗剤', unit_label="<b>roll</b>"),
        [1000] * 20,
    )
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device, listing=listing, target_price=900, use_unit_price=True)
    client.post(f"/watches/{watch.pk}/pause", {"paused": "1"})  # a message naming it
    for url in ("/watches/", f"/watches/{watch.pk}/edit/", f"/listings/{listing.pk}/"):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body and "<b>roll" not in body, url
        assert "&lt;script&gt;alert" in body, url
    client.post(f"/watches/{watch.pk}/remove")
    body = client.get(f"/watches/?removed={watch.pk}").content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;alert" in body


def test_my_watches_query_count_does_not_grow_with_rows(client, django_assert_max_num_queries):
    device, _ = device_with_cookie(client)
    for listing in ListingFactory.create_batch(50):
        PricePoint.objects.create(
            listing=listing, observed_at=NOW, price=1000, shipping=0, in_stock=True
        )
        WatchFactory(device=device, listing=listing, target_price=900)
    # device, watches (with listings and first price point), session-less messages: a few.
    with django_assert_max_num_queries(4):
        response = client.get("/watches/")
    assert response.content.decode().count('class="card watch-row') == 50


def test_listing_page_query_count_with_watches(client, listing, django_assert_max_num_queries):
    device, _ = device_with_cookie(client)
    WatchFactory.create_batch(50, device=device, listing=listing)
    WatchFactory.create_batch(50, listing=listing)  # other people's: not read
    with django_assert_max_num_queries(5):
        assert client.get(f"/listings/{listing.pk}/").status_code == 200
