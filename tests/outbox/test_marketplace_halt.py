"""Outbox rows whose re-check needs a marketplace halted for a configuration fault wait,
against the fake Ichiba and the fake Yahoo: `retry` `marketplace_halted`, no retry counted,
due again at the probe time; never `failed` at the cap, never sent on a stale price. Once the
marketplace answers again they go out on a fresh price, or are dropped by the re-check, as
any other row."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.core.management import call_command

from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.outbox_helpers import enqueue_for
from watches.marketplaces import halts
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.models import Listing, MarketplaceHalt, Product, Watch
from watches.polling.observations import fetch
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 12, 6, 10, 0, tzinfo=TOKYO)
PROBE = 300
CODE, OTHER = "yasu-shop:tp-12r", "yasu-shop:dt-2k"
JAN = "4901234567894"


@pytest.fixture
def clock(time_machine, settings):
    settings.MARKETPLACE_PROBE_SECONDS = PROBE
    time_machine.move_to(T0, tick=False)
    return time_machine


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def held(clock, ichiba, recording_channel, settings):
    """A watch for ¥1000 or less on a Rakuten item at ¥900, its row pending, and Rakuten's
    API version retired: the dispatcher's re-fetch halts Rakuten and holds the row."""
    ichiba.add(CODE, price=900)
    listing = ListingFactory(source="rakuten", item_code=CODE, price=900, units_per_pack=None)
    watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=1000)
    row = enqueue_for(watch, price=900, line="1000")
    settings.RAKUTEN_API_VERSION = "20220601"
    run_cycle()
    row.refresh_from_db()
    return row


def fix(ichiba) -> None:
    ichiba.versions.add("20220601")  # as if the operator had set a version Rakuten knows


def test_the_dispatchers_re_fetch_halts_the_marketplace_and_holds_the_row(held, ichiba):
    assert (held.status, held.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    assert held.retry_count == 0
    assert held.next_attempt_at == at(PROBE)  # the probe time
    assert "RAKUTEN_API_VERSION" in held.detail
    assert MarketplaceHalt.objects.get().source == "rakuten"
    assert len(ichiba.requests) == 1


def test_a_row_enqueued_while_halted_is_held_without_a_request(held, ichiba, clock):
    clock.move_to(at(60), tick=False)
    other = WatchFactory(
        listing=ListingFactory(source="rakuten", item_code=OTHER, price=900, units_per_pack=None),
        target_price=1000,
    )
    row = enqueue_for(other, price=900, line="1000")
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason, row.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        0,
    )
    assert row.next_attempt_at == at(PROBE)
    assert len(ichiba.requests) == 1


def test_a_held_row_never_reaches_failed_at_the_retry_cap(
    held, ichiba, clock, settings, recording_channel
):
    settings.OUTBOX_MAX_RETRY = 2
    Outbox.objects.filter(pk=held.pk).update(retry_count=2)  # already at the cap
    for interval in range(1, 13):  # an hour of probes, every one refused
        clock.move_to(at(interval * PROBE), tick=False)
        run_cycle()
        held.refresh_from_db()
        assert (held.status, held.reason, held.retry_count) == (
            Status.RETRY,
            Reason.MARKETPLACE_HALTED,
            2,
        )
        assert held.next_attempt_at == at((interval + 1) * PROBE)
    assert len(ichiba.requests) == 1 + 12  # one probe an interval, by the dispatcher
    assert recording_channel.delivered == []


def test_once_the_marketplace_answers_the_held_row_goes_out_on_a_fresh_price(
    held, ichiba, clock, recording_channel
):
    clock.move_to(at(PROBE - 1), tick=False)
    run_cycle()  # not due yet
    assert len(ichiba.requests) == 1
    fix(ichiba)
    ichiba.set(CODE, price=850)  # the price moved while we could not look
    clock.move_to(at(PROBE), tick=False)
    run_cycle()  # the dispatcher takes the probe: answered, the halt lifts
    held.refresh_from_db()
    assert (held.status, held.reason) == (Status.SENT, Reason.DELIVERED)
    ((row_id, message),) = recording_channel.delivered
    assert row_id == held.pk and message.price == 850 and "¥850" in message.body
    assert not MarketplaceHalt.objects.exists()
    assert held.retry_count == 0
    story = list(held.events.order_by("id").values_list("to_status", "reason"))
    assert story == [
        ("sending", "claimed"),
        ("retry", "marketplace_halted"),
        ("sending", "claimed"),
        ("sent", "delivered"),
    ]


def test_once_the_marketplace_answers_a_held_row_that_no_longer_holds_is_dropped(
    held, ichiba, clock, recording_channel
):
    fix(ichiba)
    ichiba.set(CODE, price=1200)
    clock.move_to(at(PROBE), tick=False)
    run_cycle()
    held.refresh_from_db()
    assert (held.status, held.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert recording_channel.delivered == []


def test_a_poller_that_took_the_probe_releases_the_rows_due_at_the_probe_time(
    held, ichiba, clock, recording_channel
):
    """Whoever probes first, rows held until the probe time go out once it is answered."""
    listing = Listing.objects.get(item_code=CODE)
    Listing.objects.filter(pk=listing.pk).update(last_polled_at=None)
    fix(ichiba)
    ichiba.set(CODE, price=870)
    clock.move_to(at(PROBE), tick=False)
    poll()  # the plan's probe: answered
    assert not MarketplaceHalt.objects.exists()
    clock.move_to(at(PROBE + 60), tick=False)
    run_cycle()
    held.refresh_from_db()
    assert held.status == Status.SENT
    ((_, message),) = recording_channel.delivered
    assert message.price == 870


def test_a_dispatcher_that_loses_the_probe_holds_its_rows_until_the_next(
    held, ichiba, clock, recording_channel
):
    clock.move_to(at(PROBE), tick=False)
    fetch("rakuten", [OTHER])  # another process's probe, refused again
    assert len(ichiba.requests) == 2
    run_cycle()
    held.refresh_from_db()
    # A probe taken a moment ago may still be on its way: the row looks again soon…
    assert (held.status, held.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    assert held.next_attempt_at == at(PROBE + halts.PROBE_ANSWER_WAIT)
    clock.move_to(at(PROBE + halts.PROBE_ANSWER_WAIT), tick=False)
    run_cycle()
    held.refresh_from_db()
    # …finds it refused, and waits for the next probe, with no request of its own.
    assert (held.status, held.reason, held.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        0,
    )
    assert held.next_attempt_at == at(2 * PROBE)
    assert len(ichiba.requests) == 2


def test_a_dispatcher_that_finds_the_probe_in_flight_asks_again_soon(
    held, ichiba, clock, recording_channel
):
    """Another process took the due probe and has not been answered yet: the rows wait for
    that answer (seconds), not for a whole interval."""
    clock.move_to(at(PROBE), tick=False)
    assert halts.may_probe("rakuten", at(PROBE))  # another process, sending its probe
    run_cycle()
    held.refresh_from_db()
    assert (held.status, held.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    assert held.next_attempt_at == at(PROBE + halts.PROBE_ANSWER_WAIT)
    assert len(ichiba.requests) == 1
    # Its probe is answered: the halt lifts, and the row goes out on its next attempt.
    fix(ichiba)
    answered = RakutenMarketplace().fetch([OTHER])
    halts.record("rakuten", answered, at(PROBE), probe=MarketplaceHalt.objects.get())
    assert not MarketplaceHalt.objects.exists()
    clock.move_to(at(PROBE + halts.PROBE_ANSWER_WAIT), tick=False)
    run_cycle()
    held.refresh_from_db()
    assert held.status == Status.SENT


def test_the_command_holds_and_releases_too(held, ichiba, clock, recording_channel):
    fix(ichiba)
    clock.move_to(at(PROBE), tick=False)
    call_command("dispatch_outbox")
    held.refresh_from_db()
    assert held.status == Status.SENT


def test_a_product_watch_waits_for_a_halted_offer_marketplace(
    clock, yahoo, recording_channel, settings
):
    """Yahoo! Shopping refuses the application id: a product watch whose only offers are
    there is held, then sent once Yahoo answers again."""
    yahoo.add("yasu-store_tp-12r", jan=JAN, price=480)
    product = Product.objects.create(jan=JAN, name="テスト商品")
    offer = ListingFactory(
        source="yahoo", item_code="yasu-store_tp-12r", product=product, jan=JAN, price=480
    )
    watch = Watch.objects.create(
        device=DeviceFactory(),
        listing=offer,
        product=product,
        trigger="target_price",
        target_price=500,
    )
    row = enqueue_for(watch, price=480, line="500")
    settings.YAHOO_APP_ID = "not-registered"
    run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason, row.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        0,
    )
    assert "YAHOO_APP_ID" in row.detail
    asked = len(yahoo.requests)
    clock.move_to(at(PROBE - 1), tick=False)
    Outbox.objects.filter(pk=row.pk).update(next_attempt_at=at(PROBE - 1))
    run_cycle()  # due (a staff "retry now"), but Yahoo is not asked before the probe
    assert len(yahoo.requests) == asked
    from tests.fakes.yahoo import APP_ID

    settings.YAHOO_APP_ID = APP_ID
    yahoo.set("yasu-store_tp-12r", price=460)
    clock.move_to(at(2 * PROBE), tick=False)
    run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT
    ((_, message),) = recording_channel.delivered
    assert message.price == 460


def offers_on_both(ichiba, yahoo, *, rakuten_price: int = 700):
    """A product sold at ¥480 on Yahoo (the offer detected under the ¥500 line) and at
    `rakuten_price` on Rakuten, and a watch of it."""
    yahoo.add("yasu-store_tp-12r", jan=JAN, price=480)
    ichiba.add(CODE, jan=JAN, price=rakuten_price)
    product = Product.objects.create(jan=JAN, name="トイレットペーパー 12ロール")
    cheap = ListingFactory(
        source="yahoo",
        item_code="yasu-store_tp-12r",
        product=product,
        jan=JAN,
        price=480,
        units_per_pack=None,
    )
    ListingFactory(
        source="rakuten",
        item_code=CODE,
        product=product,
        jan=JAN,
        price=rakuten_price,
        units_per_pack=None,
    )
    return WatchFactory(listing=cheap, product=product, target_price=500)


def test_a_product_row_waits_for_the_halted_marketplace_that_held_its_cheap_offer(
    clock, ichiba, yahoo, recording_channel, settings
):
    """Rakuten's offer alone is above the line; Yahoo's, the one detected, cannot be read:
    not `condition_lost` on what is known, but held until Yahoo answers."""
    row = enqueue_for(offers_on_both(ichiba, yahoo), price=480, line="500")
    registered, settings.YAHOO_APP_ID = settings.YAHOO_APP_ID, "not-registered"

    run_cycle()

    row.refresh_from_db()
    assert MarketplaceHalt.objects.get().source == "yahoo"
    assert (row.status, row.reason, row.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        0,
    )
    assert "YAHOO_APP_ID" in row.detail
    # Yahoo answers again, its offer still at ¥480: the row goes out on it.
    settings.YAHOO_APP_ID = registered
    clock.move_to(at(PROBE), tick=False)
    run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT
    assert row.sent_message["price"] == 480


def test_a_product_row_on_offers_that_hold_goes_out_though_another_marketplace_is_halted(
    clock, ichiba, yahoo, recording_channel, settings
):
    row = enqueue_for(offers_on_both(ichiba, yahoo, rakuten_price=450), price=480, line="500")
    settings.YAHOO_APP_ID = "not-registered"

    run_cycle()

    row.refresh_from_db()
    assert row.status == Status.SENT
    assert row.sent_message["price"] == 450


def test_a_product_row_held_for_a_halt_is_not_failed_by_the_other_marketplaces_5xx(
    clock, ichiba, yahoo, recording_channel, settings
):
    row = enqueue_for(offers_on_both(ichiba, yahoo), price=480, line="500")
    ichiba.behave[JAN] = "server"
    settings.OUTBOX_MAX_RETRY = 2
    Outbox.objects.filter(pk=row.pk).update(retry_count=2)  # at the cap
    settings.YAHOO_APP_ID = "not-registered"

    run_cycle()

    row.refresh_from_db()
    assert (row.status, row.reason, row.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        2,
    )


def test_a_held_row_whose_probe_gets_no_answer_waits_on_uncounted(held, ichiba, clock, settings):
    """The row's re-fetch sends the probe, which gets no answer: the halt stands, and the
    row waits for it as before — the probe's network error is not a failed try of its own."""
    settings.OUTBOX_MAX_RETRY = 2
    Outbox.objects.filter(pk=held.pk).update(retry_count=2)  # at the cap
    clock.move_to(at(PROBE), tick=False)
    settings.RAKUTEN_API_URL = "http://127.0.0.1:9"  # nothing listens there

    run_cycle()

    held.refresh_from_db()
    assert MarketplaceHalt.objects.get().probe_after == at(2 * PROBE)
    assert (held.status, held.reason, held.retry_count) == (
        Status.RETRY,
        Reason.MARKETPLACE_HALTED,
        2,
    )
    assert held.next_attempt_at == at(2 * PROBE)


def test_a_held_row_is_due_at_the_probe_time_whatever_its_batch_took_to_deliver(
    clock, ichiba, yahoo, recording_channel, settings
):
    ichiba.add(CODE, price=900)
    yahoo.add("yasu-store_dt-2k", price=900)
    on_rakuten = ListingFactory(source="rakuten", item_code=CODE, price=900, units_per_pack=None)
    on_yahoo = ListingFactory(
        source="yahoo", item_code="yasu-store_dt-2k", price=900, units_per_pack=None
    )
    held = enqueue_for(WatchFactory(listing=on_rakuten, target_price=1000), price=900, line="1000")
    sent = enqueue_for(WatchFactory(listing=on_yahoo, target_price=1000), price=900, line="1000")
    settings.RAKUTEN_API_VERSION = "20220601"
    recording_channel.during = lambda: clock.move_to(at(120), tick=False)  # a slow delivery

    run_cycle()

    held.refresh_from_db()
    sent.refresh_from_db()
    assert sent.status == Status.SENT
    assert (held.status, held.reason) == (Status.RETRY, Reason.MARKETPLACE_HALTED)
    assert held.next_attempt_at == MarketplaceHalt.objects.get().probe_after == at(PROBE)


def test_a_product_row_whose_cheap_offers_marketplace_failed_for_a_moment_is_tried_again(
    clock, ichiba, yahoo, recording_channel
):
    """Not a halt: Yahoo answers 500 once. What Rakuten says alone does not drop the row."""
    row = enqueue_for(offers_on_both(ichiba, yahoo), price=480, line="500")
    yahoo.behave[JAN] = "server"

    run_cycle()

    row.refresh_from_db()
    assert (row.status, row.reason, row.retry_count) == (Status.RETRY, Reason.REFETCH_SERVER, 1)
    del yahoo.behave[JAN]
    clock.move_to(row.next_attempt_at, tick=False)
    run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT
    assert row.sent_message["price"] == 480
