"""Price polling: what is due, what history is written, what the listing remembers, what is
enqueued and with which snapshot; its command, task and schedule."""

from __future__ import annotations

import datetime as dt
import io
import json
import zoneinfo

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import Schedule

from demo.market import set_product
from demo.models import DemoProduct
from outbox.models import Outbox, Status
from tests.factories import (
    DemoProductFactory,
    DeviceFactory,
    ListingFactory,
    SubscribedDeviceFactory,
    WatchFactory,
)
from watches import tasks
from watches.models import Device, Listing, PricePoint, Trigger, Watch
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def due_listing(**fields) -> Listing:
    fields.setdefault("last_polled_at", None)
    return ListingFactory.create(**fields)


def points(listing: Listing) -> list[tuple[int | None, bool]]:
    return [
        (p.price, p.in_stock)
        for p in PricePoint.objects.filter(listing=listing).order_by("observed_at", "id")
    ]


# --- what is due --------------------------------------------------------------------------


def test_a_due_listing_gets_a_point_and_its_last_seen_state(clock):
    listing = due_listing(price=1000)
    set_product(listing.item_code, price=900)
    result = poll()
    assert (result.listings, result.observations, result.errors) == (1, 1, 0)
    listing.refresh_from_db()
    assert (listing.price, listing.in_stock, listing.last_polled_at) == (900, True, T0)
    assert points(listing) == [(900, True)]


def test_a_listing_polled_recently_is_not_due_until_half_the_interval(clock, settings):
    settings.POLL_MINUTES = 15
    listing = due_listing(last_polled_at=T0)
    clock.move_to(at(7), tick=False)
    assert poll().listings == 0
    clock.move_to(at(7.5), tick=False)
    assert poll().listings == 1
    listing.refresh_from_db()
    assert listing.last_polled_at == at(7.5)


def test_a_paused_listing_is_not_polled(clock):
    due_listing(paused=True)
    assert poll().listings == 0
    assert not PricePoint.objects.exists()


def test_least_recently_polled_go_first_and_a_long_run_stops_between_batches(clock, settings):
    settings.POLL_BATCH_SIZE = 2
    listings = [due_listing(last_polled_at=at(-60 - i)) for i in range(5)]
    result = poll(max_seconds=0)
    assert result.listings == 2
    polled = set(Listing.objects.filter(last_polled_at=T0).values_list("pk", flat=True))
    assert polled == {listings[4].pk, listings[3].pk}


# --- history ------------------------------------------------------------------------------


def test_an_unchanged_price_is_written_again_only_after_the_history_interval(clock, settings):
    settings.POLL_HISTORY_MIN_MINUTES = 60
    listing = due_listing(price=1000)
    poll()
    for minutes in (15, 30, 45):
        clock.move_to(at(minutes), tick=False)
        assert poll().observations == 1
    assert points(listing) == [(1000, True)]
    clock.move_to(at(60), tick=False)
    poll()
    assert points(listing) == [(1000, True), (1000, True)]
    listing.refresh_from_db()
    assert listing.last_polled_at == at(60)


def test_a_changed_price_is_written_at_once(clock):
    listing = due_listing(price=1000)
    poll()
    set_product(listing.item_code, price=980)
    clock.move_to(at(15), tick=False)
    poll()
    assert points(listing) == [(1000, True), (980, True)]


def test_a_stock_change_is_written_at_once(clock):
    listing = due_listing(price=1000)
    poll()
    set_product(listing.item_code, in_stock=False)
    clock.move_to(at(15), tick=False)
    poll()
    assert points(listing) == [(1000, True), (1000, False)]
    listing.refresh_from_db()
    assert listing.in_stock is False


def test_an_error_is_recorded_on_the_listing_and_writes_no_point(clock):
    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000)
    DemoProduct.objects.filter(item_code=listing.item_code).update(fault="server", price=500)
    result = poll()
    assert (result.observations, result.errors, result.enqueued) == (0, 1, 0)
    listing.refresh_from_db()
    assert listing.last_error.startswith("server:")
    assert listing.last_error_at == T0
    assert listing.price == 1000
    assert not PricePoint.objects.exists() and not Outbox.objects.exists()


def test_a_good_answer_clears_the_last_error(clock):
    listing = due_listing()
    DemoProduct.objects.filter(item_code=listing.item_code).update(fault="network")
    poll()
    DemoProduct.objects.filter(item_code=listing.item_code).update(fault="")
    clock.move_to(at(15), tick=False)
    poll()
    listing.refresh_from_db()
    assert listing.last_error == ""


def test_an_empty_answer_is_an_out_of_stock_point_at_the_last_price(clock, ichiba):
    listing = due_listing(source="rakuten", item_code="yasu-shop:tp-12r", price=1280)
    ichiba.behave["yasu-shop:tp-12r"] = "empty"
    result = poll()
    assert (result.observations, result.errors) == (1, 0)
    listing.refresh_from_db()
    assert listing.in_stock is False and listing.price == 1280
    assert points(listing) == [(1280, False)]


def test_each_source_is_fetched_through_its_own_adapter(clock, ichiba):
    rakuten = due_listing(source="rakuten", item_code="yasu-shop:tp-12r", price=1)
    demo = due_listing(price=1000)
    ichiba.add("yasu-shop:tp-12r", price=1280)
    result = poll()
    assert (result.listings, result.observations) == (2, 2)
    assert ichiba.asked("yasu-shop:tp-12r") == 1
    rakuten.refresh_from_db()
    demo.refresh_from_db()
    assert (rakuten.price, demo.price) == (1280, 1000)
    # The first fetch fills what intake did not know.
    assert rakuten.url == "https://item.rakuten.co.jp/yasu-shop/tp-12r/"


# --- detection ----------------------------------------------------------------------------


def test_a_detection_is_enqueued_with_a_useful_snapshot(clock):
    listing = due_listing(price=1000, shipping=0, name="アタックZERO 2kg")
    for day in range(1, 31):
        PricePoint.objects.create(
            listing=listing,
            observed_at=T0 - dt.timedelta(days=day),
            price=1000,
            shipping=0,
            in_stock=True,
        )
    watch = WatchFactory(listing=listing, target_price=950)
    set_product(listing.item_code, price=900)
    assert poll().enqueued == 1
    row = Outbox.objects.get()
    assert (row.watch_id, row.device_id, row.trigger, row.status) == (
        watch.pk,
        watch.device_id,
        Trigger.TARGET_PRICE,
        Status.PENDING,
    )
    assert row.detected_at == T0
    payload = row.detected_payload
    assert payload["trigger"] == "target_price"
    assert (payload["price"], payload["shipping"], payload["effective_price"]) == (900, 0, 900)
    assert (payload["value"], payload["line"]) == ("900", "950")
    assert (payload["typical"], payload["low_90"]) == ("1000", 1000)
    assert dt.datetime.fromisoformat(payload["observed_at"]) == T0
    assert payload["listing"] == "アタックZERO 2kg"


def test_a_price_drop_is_judged_against_the_history_before_this_observation(clock):
    listing = due_listing(price=1000)
    for day in range(1, 31):
        PricePoint.objects.create(
            listing=listing, observed_at=T0 - dt.timedelta(days=day), price=1000, in_stock=True
        )
    WatchFactory(listing=listing, trigger=Trigger.PRICE_DROP, target_price=None, drop_percent=15)
    set_product(listing.item_code, price=850)
    assert poll().enqueued == 1
    assert Outbox.objects.get().detected_payload["line"] == "850"


def test_every_trigger_kind_is_judged(clock):
    listing = due_listing(price=1000)
    for day in range(1, 31):
        PricePoint.objects.create(
            listing=listing,
            observed_at=T0 - dt.timedelta(days=day),
            price=1000,
            in_stock=day != 1,  # out of stock yesterday
        )
    device = DeviceFactory()
    for trigger, params in [
        (Trigger.TARGET_PRICE, {"target_price": 900}),
        (Trigger.PRICE_DROP, {"target_price": None, "drop_percent": 15}),
        (Trigger.LOWEST, {"target_price": None}),
        (Trigger.BACK_IN_STOCK, {"target_price": None}),
    ]:
        WatchFactory(listing=listing, device=device, trigger=trigger, **params)
    set_product(listing.item_code, price=800)
    assert poll().enqueued == 4
    assert set(Outbox.objects.values_list("trigger", flat=True)) == set(Trigger.values)


def test_paused_and_removed_watches_are_not_judged(clock):
    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000, paused=True)
    WatchFactory(listing=listing, target_price=2000, removed_at=at(-5))
    result = poll()
    assert (result.observations, result.enqueued) == (1, 0)


def test_a_device_that_cannot_be_reached_gets_nothing_enqueued(clock):
    listing = due_listing(price=1000)
    gone = SubscribedDeviceFactory(push_active=False)
    WatchFactory(listing=listing, device=gone, target_price=2000)
    live = WatchFactory(listing=listing, device=SubscribedDeviceFactory(), target_price=2000)
    assert poll().enqueued == 1
    assert Outbox.objects.get().watch_id == live.pk


def test_polling_again_the_same_day_folds_into_the_row_already_enqueued(clock):
    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000)
    assert poll().enqueued == 1
    clock.move_to(at(15), tick=False)
    assert poll().enqueued == 0
    assert Outbox.objects.count() == 1


def test_a_thousand_listings_with_ten_watches_each_enqueue_in_bulk(clock, settings):
    settings.POLL_BATCH_SIZE = 200
    products = DemoProductFactory.build_batch(1000, price=900)
    DemoProduct.objects.bulk_create(products)
    listings = Listing.objects.bulk_create(
        ListingFactory.build(item_code=p.item_code, price=1000, last_polled_at=None)
        for p in products
    )
    devices = Device.objects.bulk_create(DeviceFactory.build_batch(10))
    Watch.objects.bulk_create(
        WatchFactory.build(listing=listing, device=device, target_price=950)
        for listing in listings
        for device in devices
    )
    outbox_table = connection.ops.quote_name(Outbox._meta.db_table)
    out = io.StringIO()
    with CaptureQueriesContext(connection) as queries:
        call_command("poll_prices", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "products": 0,
        "listings": 1000,
        "observations": 1000,
        "errors": 0,
        "enqueued": 10_000,
    }
    inserts = [q for q in queries if q["sql"].startswith(f"INSERT INTO {outbox_table}")]
    assert 1 <= len(inserts) <= 25  # 500 rows a statement, not one per watch
    watch_reads = [q for q in queries if 'FROM "watches_watch"' in q["sql"]]
    # One for the poll plan (the watches of every due listing, grouped), one per batch of 200.
    assert len(watch_reads) == 1 + 5
    # …and one look at the marketplace's halt for the plan and for each adapter call.
    assert len(queries) < 110
    assert Outbox.objects.count() == 10_000


# --- command, task, schedule --------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_poll_prices_json_prints_exactly_one_object(clock):
    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000)
    due_listing(paused=False)
    DemoProduct.objects.filter(item_code=Listing.objects.last().item_code).update(fault="server")
    out = io.StringIO()
    call_command("poll_prices", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "products": 0,
        "listings": 2,
        "observations": 1,
        "errors": 1,
        "enqueued": 1,
    }


def test_poll_prices_json_stays_one_object_on_a_terminal(clock):
    for _ in range(120):
        due_listing()
    out = Terminal()
    call_command("poll_prices", "--json", stdout=out)
    assert json.loads(out.getvalue())["listings"] == 120


def test_poll_prices_plain_output(clock):
    due_listing()
    out = io.StringIO()
    call_command("poll_prices", stdout=out)
    assert out.getvalue().strip() == "products=0 listings=1 observations=1 errors=0 enqueued=0"


def test_poll_prices_listing_polls_it_even_when_not_due(clock):
    listing = due_listing(last_polled_at=T0, price=1000)
    due_listing()  # due, but not asked for
    out = io.StringIO()
    call_command("poll_prices", "--listing", listing.item_code, "--json", stdout=out)
    assert json.loads(out.getvalue())["listings"] == 1


def test_poll_prices_unknown_listing_is_an_error(clock):
    with pytest.raises(CommandError, match="no listing with item code nope"):
        call_command("poll_prices", "--listing", "nope")


def test_progress_is_shown_on_a_terminal_when_there_are_many(clock, settings):
    settings.POLL_BATCH_SIZE = 50
    for _ in range(120):
        due_listing()
    out = Terminal()
    call_command("poll_prices", stdout=out)
    text = out.getvalue()
    assert "\rpolled 50/120 listings" in text and "\rpolled 120/120 listings" in text
    assert text.rstrip().endswith("products=0 listings=120 observations=120 errors=0 enqueued=0")


def test_no_progress_when_not_on_a_terminal(clock):
    for _ in range(120):
        due_listing()
    out = io.StringIO()
    call_command("poll_prices", stdout=out)
    assert "polled" not in out.getvalue()


def test_no_progress_for_a_few_listings_on_a_terminal(clock):
    due_listing()
    out = Terminal()
    call_command("poll_prices", stdout=out)
    assert "polled" not in out.getvalue()


def test_the_scheduled_task_polls_what_is_due(clock):
    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000)
    assert tasks.poll() == {
        "products": 0,
        "listings": 1,
        "observations": 1,
        "errors": 0,
        "enqueued": 1,
    }


def test_a_scheduled_run_while_another_is_still_running_polls_nothing(clock):
    from django.core.cache import caches

    listing = due_listing(price=1000)
    WatchFactory(listing=listing, target_price=2000)
    # Another worker's run holds the guard (runs start every POLL_EVERY_MINUTES; one can
    # outlast that): this one must not ask for the same due listings again.
    caches["locks"].add(tasks.POLL_LOCK, "another run", timeout=60)
    assert tasks.poll() == {"skipped": 1}
    listing.refresh_from_db()
    assert listing.last_polled_at is None  # not polled
    assert Outbox.objects.count() == 0

    caches["locks"].delete(tasks.POLL_LOCK)  # that run ended
    assert tasks.poll()["listings"] == 1
    assert caches["locks"].get(tasks.POLL_LOCK) is None  # and this one let go of the guard


def test_migrate_creates_the_poll_schedule_once(settings):
    # Runs start every POLL_EVERY_MINUTES; POLL_MINUTES is how often a listing is checked.
    settings.POLL_MINUTES = 20
    settings.POLL_EVERY_MINUTES = 3
    call_command("migrate", verbosity=0)
    call_command("migrate", verbosity=0)
    schedule = Schedule.objects.get(name="watches-poll")
    assert (schedule.func, schedule.minutes) == ("watches.tasks.poll", 3)


def test_polling_fills_a_blank_name_but_keeps_one_staff_set(clock, ichiba):
    blank = due_listing(source="rakuten", item_code="yasu-shop:a", name="", price=1)
    named = due_listing(source="rakuten", item_code="yasu-shop:b", name="スタッフの名前", price=1)
    ichiba.add("yasu-shop:a")
    ichiba.add("yasu-shop:b")
    poll()
    blank.refresh_from_db()
    named.refresh_from_db()
    assert blank.name == "テスト商品 a"
    assert named.name == "スタッフの名前"


def test_a_misconfigured_marketplace_is_an_error_per_listing_not_a_crash(clock, settings):
    settings.MARKETPLACE_ADAPTERS = {
        **settings.MARKETPLACE_ADAPTERS,
        "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
    }
    settings.RAKUTEN_APP_ID = ""
    broken = due_listing(source="rakuten", item_code="yasu-shop:a")
    fine = due_listing(price=1000)
    result = poll()
    assert (result.listings, result.observations, result.errors) == (2, 1, 1)
    broken.refresh_from_db()
    fine.refresh_from_db()
    assert broken.last_error.startswith("bad_response: ImproperlyConfigured")
    assert fine.last_error == "" and fine.last_polled_at == T0
