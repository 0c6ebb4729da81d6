"""The dispatcher: every branch of a cycle, on the demo marketplace and a recording channel."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from demo.models import DemoProduct
from outbox.channels.base import DeliveryError, DeliveryKind
from outbox.claims import claim_due, recover_expired_leases
from outbox.dispatch import run_cycle
from outbox.models import DispatchRun, Outbox, OutboxEvent, Reason, Status
from outbox.retries import backoff
from outbox.transitions import Fence, Outcome, transition
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.outbox_helpers import enqueue_for
from watches.models import Channel, PricePoint

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def _watch(price: int = 900, target: int = 950, **kwargs):
    listing = ListingFactory(price=price)
    return WatchFactory(listing=listing, target_price=target, **kwargs)


def _set_demo(watch, **fields) -> None:
    DemoProduct.objects.filter(item_code=watch.listing.item_code).update(**fields)


def _reload(row: Outbox) -> Outbox:
    return Outbox.objects.get(pk=row.pk)


# --- sent ------------------------------------------------------------------------------


def test_sent_message_carries_the_refetched_price_not_the_detected_one(recording_channel):
    watch = _watch(target=950)
    row = enqueue_for(watch, price=900)
    _set_demo(watch, price=880)  # still under the target, but not what detection saw

    result = run_cycle()

    assert result.by_status[Status.SENT] == 1
    ((row_id, message),) = recording_channel.delivered
    assert row_id == row.pk
    assert message.price == 880
    assert "¥880" in message.body and "¥900" not in message.body
    row = _reload(row)
    assert row.status == Status.SENT and row.reason == Reason.DELIVERED
    assert row.sent_at == NOW and row.sent_message["price"] == 880
    assert row.detected_payload["price"] == 900, "the detection snapshot is never rewritten"


def test_sent_advances_last_notified_to_the_fresh_value(recording_channel):
    watch = _watch(target=950)
    enqueue_for(watch, price=900)
    _set_demo(watch, price=870, shipping=20)

    run_cycle()

    watch.refresh_from_db()
    assert watch.last_notified_price == Decimal("890")
    assert watch.last_notified_at == NOW


def test_refetch_writes_a_price_point_and_updates_the_listing(recording_channel):
    watch = _watch(target=950)
    enqueue_for(watch)
    _set_demo(watch, price=870)

    run_cycle()

    point = PricePoint.objects.get(listing=watch.listing)
    assert (point.price, point.in_stock, point.observed_at) == (870, True, NOW)
    watch.listing.refresh_from_db()
    assert watch.listing.price == 870 and watch.listing.last_polled_at == NOW


def test_each_listing_is_refetched_once_per_cycle(recording_channel, django_assert_max_num_queries):
    listing = ListingFactory(price=900)
    watches = [WatchFactory(listing=listing, target_price=950) for _ in range(5)]
    for watch in watches:
        enqueue_for(watch)

    run_cycle()

    assert PricePoint.objects.filter(listing=listing).count() == 1
    assert Outbox.objects.filter(status=Status.SENT).count() == 5


@pytest.mark.parametrize("answer", ["unchanged", "moved", "failed", "reused", "product"])
def test_a_cycle_s_statements_do_not_grow_with_its_listings(recording_channel, answer, settings):
    """The same statements for one batch over 3 listings as over 12, whatever the re-fetch
    finds — the price as the poll saw it, a new price (points written), a marketplace error,
    a poll's observation fresh enough to reuse (nothing asked) — and for product watches
    over 3 products as over 12: every listing is read, asked about and written back in bulk,
    and nothing the batch reads of a listing (a deferred field) is fetched one by one. (A
    worker per delivery: the batch's deliveries are one step, `outbox.pacing`.)"""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from watches.models import Listing, Product
    from watches.pages.watchlist import WatchParams
    from watches.products.jan import check_digit
    from watches.products.watches import save_product_watch

    def watch_for(n: int):
        if answer != "product":
            polled = timezone.now() - dt.timedelta(seconds=10 if answer == "reused" else 60)
            return WatchFactory(
                listing=ListingFactory(price=900, last_polled_at=polled), target_price=950
            )
        body = f"49{n:010d}"
        jan = f"{body}{check_digit(body)}"
        product = Product.objects.create(jan=jan)
        listing = ListingFactory.create(price=900, jan=jan)
        Listing.objects.filter(pk=listing.pk).update(product=product)
        DemoProduct.objects.filter(item_code=listing.item_code).update(jan=jan)
        params = WatchParams(trigger="target_price", target_price=950)
        return save_product_watch(DeviceFactory.create(), product, params)[0]

    settings.OUTBOX_DELIVERY_WORKERS = 12
    made = iter(range(1000))

    def statements(count: int) -> int:
        Outbox.objects.all().delete()
        for _ in range(count):
            row = enqueue_for(watch_for(next(made)))
            changes: dict[str, dict[str, Any]] = {
                "moved": {"price": 880},
                "failed": {"fault": "server"},
            }
            change = changes.get(answer)
            if change:
                DemoProduct.objects.filter(item_code=row.watch.listing.item_code).update(**change)
        with CaptureQueriesContext(connection) as queries:
            run_cycle()
        status = Status.RETRY if answer == "failed" else Status.SENT
        assert Outbox.objects.filter(status=status).count() == count
        return len(queries)

    statements(1)  # a process's first cycle reads once what later ones keep
    assert statements(3) == statements(12)


def test_sent_events_tell_the_whole_story(recording_channel):
    watch = _watch()
    row = enqueue_for(watch)

    run_cycle()

    events = list(OutboxEvent.objects.filter(outbox=row).order_by("id"))
    assert [(e.from_status, e.to_status, e.reason) for e in events] == [
        ("pending", "sending", "claimed"),
        ("sending", "sent", "delivered"),
    ]
    assert events[1].data["fresh"]["price"] == 900
    assert events[1].data["message"]["price"] == 900


# --- pre-guards --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (
            lambda w: w.__class__.objects.filter(pk=w.pk).update(removed_at=NOW),
            Reason.WATCH_REMOVED,
        ),
        (lambda w: w.__class__.objects.filter(pk=w.pk).update(paused=True), Reason.WATCH_PAUSED),
        (
            lambda w: w.listing.__class__.objects.filter(pk=w.listing_id).update(paused=True),
            Reason.LISTING_PAUSED,
        ),
    ],
    ids=["watch_removed", "watch_paused", "listing_paused"],
)
def test_pre_guards_drop_without_asking_the_marketplace(recording_channel, setup, reason):
    watch = _watch()
    row = enqueue_for(watch)
    setup(watch)

    result = run_cycle()

    assert result.by_status[Status.DROPPED] == 1
    assert (_reload(row).status, _reload(row).reason) == (Status.DROPPED, reason)
    assert not PricePoint.objects.exists(), "a guarded row never costs a marketplace request"
    assert recording_channel.delivered == []


def test_webpush_row_without_a_subscription_is_dropped(recording_channel):
    watch = _watch(device=DeviceFactory(channel=Channel.WEBPUSH, push_active=False))
    row = enqueue_for(watch)

    run_cycle()

    assert (_reload(row).status, _reload(row).reason) == (Status.DROPPED, Reason.NO_SUBSCRIPTION)


# --- re-fetch outcomes --------------------------------------------------------------------


def test_out_of_stock_at_send_time_is_dropped(recording_channel):
    watch = _watch()
    row = enqueue_for(watch)
    _set_demo(watch, in_stock=False)

    run_cycle()

    assert (_reload(row).status, _reload(row).reason) == (Status.DROPPED, Reason.OUT_OF_STOCK)
    assert PricePoint.objects.get(listing=watch.listing).in_stock is False


def test_item_gone_from_the_marketplace_is_dropped(recording_channel):
    watch = _watch()
    row = enqueue_for(watch)
    DemoProduct.objects.filter(item_code=watch.listing.item_code).delete()

    run_cycle()

    assert (_reload(row).status, _reload(row).reason) == (Status.DROPPED, Reason.ITEM_NOT_FOUND)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("rate_limited", Reason.REFETCH_RATE_LIMITED),
        ("network", Reason.REFETCH_NETWORK),
        ("server", Reason.REFETCH_SERVER),
        ("bad_response", Reason.REFETCH_BAD_RESPONSE),
    ],
)
def test_transient_refetch_failures_retry(recording_channel, fault, reason):
    watch = _watch()
    row = enqueue_for(watch)
    _set_demo(watch, fault=fault)

    result = run_cycle()

    row = _reload(row)
    assert result.by_status[Status.RETRY] == 1
    assert (row.status, row.reason, row.retry_count) == (Status.RETRY, reason, 1)
    assert row.claimed_by == ""
    # the demo marketplace's rate limit says Retry-After: 60, longer than the first 30 s step
    expected = dt.timedelta(seconds=60 if fault == "rate_limited" else 30)
    assert row.next_attempt_at == NOW + expected
    watch.listing.refresh_from_db()
    assert watch.listing.last_error.startswith(fault)


def test_retry_row_is_claimed_and_rechecked_again_when_due(recording_channel, frozen):
    watch = _watch()
    row = enqueue_for(watch)
    _set_demo(watch, fault="server")
    run_cycle()
    _set_demo(watch, fault="", price=930)

    assert run_cycle().by_status[Status.SENT] == 0, "not due yet"
    frozen.shift(dt.timedelta(seconds=31))
    assert run_cycle().by_status[Status.SENT] == 1

    assert recording_channel.delivered[0][1].price == 930
    assert _reload(row).status == Status.SENT


# --- re-judging ---------------------------------------------------------------------------


def test_price_back_up_before_send_is_dropped_condition_lost(recording_channel):
    watch = _watch(target=950)
    row = enqueue_for(watch, price=900)
    _set_demo(watch, price=990)

    run_cycle()

    row = _reload(row)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    event = row.events.get(to_status=Status.DROPPED)
    assert event.data["fresh"]["price"] == 990 and event.data["line"] == "950"
    assert recording_channel.delivered == []


def test_shipping_counts_in_the_recheck(recording_channel):
    watch = _watch(target=950)
    row = enqueue_for(watch, price=900)
    _set_demo(watch, price=900, shipping=80)

    run_cycle()

    assert _reload(row).reason == Reason.CONDITION_LOST


@pytest.mark.parametrize(
    ("language", "said"), [("en", "(shipping unknown)"), ("ja", "（送料不明）")]
)
def test_a_message_whose_shop_names_no_shipping_says_it_is_unknown(
    recording_channel, language, said
):
    """The price compared leaves out a fee nobody named: the message never lets it pass for
    free shipping."""
    watch = _watch(target=950, device=DeviceFactory(language=language))
    row = enqueue_for(watch, price=900)
    _set_demo(watch, price=900, shipping=None)

    run_cycle()

    row = _reload(row)
    assert row.status == Status.SENT, (row.reason, row.detail)
    assert row.events.get(to_status=Status.SENT).data["fresh"]["shipping"] is None
    ((_, message),) = recording_channel.delivered
    assert "¥900" in message.body and message.body.endswith(said), message.body


def test_already_notified_when_a_later_delivery_moved_the_baseline(recording_channel):
    watch = _watch(target=950)
    row = enqueue_for(watch, detected_at=NOW - dt.timedelta(hours=1), price=900)
    watch.last_notified_price = Decimal("900")
    # Told ten minutes ago of a detection made after this row's.
    watch.last_notified_at = watch.last_notified_detected_at = NOW - dt.timedelta(minutes=10)
    watch.save()
    _set_demo(watch, price=900)

    run_cycle()

    assert _reload(row).reason == Reason.ALREADY_NOTIFIED


def test_only_the_newest_row_of_a_watch_goes_out_the_older_is_superseded(recording_channel):
    watch = _watch(target=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    newer = enqueue_for(watch, detected_at=NOW)

    result = run_cycle()

    assert _reload(newer).status == Status.SENT
    assert (_reload(older).status, _reload(older).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    )
    assert _reload(older).events.last().data == {"superseded_by": newer.pk}
    assert len(recording_channel.delivered) == 1
    assert result.by_status[Status.DROPPED] == 1


# --- delivery outcomes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (DeliveryKind.RATE_LIMITED, Reason.DELIVER_RATE_LIMITED),
        (DeliveryKind.NETWORK, Reason.DELIVER_NETWORK),
        (DeliveryKind.SERVER, Reason.DELIVER_SERVER),
    ],
)
def test_transient_delivery_failures_retry(recording_channel, kind, reason):
    watch = _watch()
    row = enqueue_for(watch)
    recording_channel.failures.append(DeliveryError(kind, "try later"))

    run_cycle()

    row = _reload(row)
    assert (row.status, row.reason, row.retry_count) == (Status.RETRY, reason, 1)
    assert row.next_attempt_at == NOW + dt.timedelta(seconds=30)


def test_delivery_retry_after_longer_than_backoff_is_honoured(recording_channel):
    row = enqueue_for(_watch())
    recording_channel.failures.append(
        DeliveryError(DeliveryKind.RATE_LIMITED, "slow down", retry_after=600)
    )

    run_cycle()

    assert _reload(row).next_attempt_at == NOW + dt.timedelta(seconds=600)


def test_subscription_gone_drops_and_deactivates_the_device(recording_channel):
    watch = _watch()
    row = enqueue_for(watch)
    recording_channel.failures.append(DeliveryError(DeliveryKind.GONE, "410 Gone", status_code=410))

    run_cycle()

    assert (_reload(row).status, _reload(row).reason) == (Status.DROPPED, Reason.SUBSCRIPTION_GONE)
    watch.device.refresh_from_db()
    assert watch.device.push_active is False


def test_rejected_delivery_fails_at_once_with_the_response_kept(recording_channel):
    row = enqueue_for(_watch())
    recording_channel.failures.append(
        DeliveryError(DeliveryKind.REJECTED, "413 payload too large", status_code=413)
    )

    run_cycle()

    row = _reload(row)
    assert (row.status, row.reason) == (Status.FAILED, Reason.DELIVER_REJECTED)
    assert "413 payload too large" in row.detail
    assert row.events.get(to_status=Status.FAILED).data["status_code"] == 413


def test_failed_at_the_cap(recording_channel, settings):
    settings.OUTBOX_MAX_RETRY = 3
    watch = _watch()
    row = enqueue_for(watch)
    Outbox.objects.filter(pk=row.pk).update(retry_count=3)
    recording_channel.failures.append(DeliveryError(DeliveryKind.SERVER, "503"))

    result = run_cycle()

    row = _reload(row)
    assert result.by_status[Status.FAILED] == 1
    assert (row.status, row.reason) == (Status.FAILED, Reason.DELIVER_SERVER)


def test_retries_climb_to_the_cap_then_fail(recording_channel, settings, frozen):
    settings.OUTBOX_MAX_RETRY = 3
    row = enqueue_for(_watch())
    for _ in range(4):
        recording_channel.failures.append(DeliveryError(DeliveryKind.NETWORK, "reset"))
        run_cycle()
        frozen.shift(dt.timedelta(hours=1))

    row = _reload(row)
    assert (row.status, row.retry_count, row.attempts) == (Status.FAILED, 3, 4)


@pytest.mark.parametrize(
    ("retry_count", "retry_after", "seconds"),
    [
        (0, None, 30),
        (1, None, 60),
        (3, None, 240),
        (5, None, 960),
        (6, None, 1800),
        (20, None, 1800),
        (0, 10, 30),
        (0, 45, 45),
        (6, 3600, 3600),
        (0, 10**9, 86400),
    ],
)
def test_backoff(retry_count, retry_after, seconds):
    assert backoff(retry_count, retry_after) == dt.timedelta(seconds=seconds)


def test_last_notified_unchanged_on_drop_and_retry(recording_channel):
    dropped = _watch(target=950)
    retried = _watch(target=950)
    enqueue_for(dropped)
    enqueue_for(retried)
    _set_demo(dropped, price=999)
    _set_demo(retried, price=900, fault="server")

    run_cycle()

    for watch in (dropped, retried):
        watch.refresh_from_db()
        assert (watch.last_notified_price, watch.last_notified_at) == (None, None)


# --- leases, limits and robustness --------------------------------------------------------


def test_expired_lease_is_recovered_to_retry(recording_channel, settings, frozen):
    settings.OUTBOX_LEASE_SECONDS = 300
    row = enqueue_for(_watch())
    transition(
        [row.pk],
        Outcome(
            Status.SENDING,
            Reason.CLAIMED,
            values={"claimed_by": "dead-dispatcher", "claimed_at": NOW},
        ),
    )
    frozen.shift(dt.timedelta(seconds=299))
    assert run_cycle().recovered == 0

    frozen.shift(dt.timedelta(seconds=2))
    result = run_cycle()

    row = _reload(row)
    assert result.recovered == 1
    assert (row.status, row.reason, row.retry_count) == (Status.RETRY, Reason.LEASE_EXPIRED, 1)
    assert row.claimed_by == ""


def test_dead_dispatcher_cannot_record_over_the_one_that_took_over(frozen):
    row = enqueue_for(_watch())
    assert claim_due("old-holder", 10, timezone.now()).ids == [row.pk]
    frozen.shift(dt.timedelta(hours=1))
    assert recover_expired_leases(timezone.now()) == 1
    frozen.shift(dt.timedelta(minutes=1))
    assert claim_due("new-holder", 10, timezone.now()).ids == [row.pk]

    # The old dispatcher wakes up and tries to record its outcome: the fence refuses it.
    assert (
        transition([row.pk], Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("old-holder"))
        == []
    )
    assert (_reload(row).status, _reload(row).claimed_by) == (Status.SENDING, "new-holder")
    assert transition(
        [row.pk], Outcome(Status.SENT, Reason.DELIVERED), fence=Fence("new-holder")
    ) == [row.pk]


def test_a_claim_takes_the_rows_keep_allows_and_leaves_the_rest_due(frozen):
    rows = [enqueue_for(_watch()) for _ in range(5)]
    claim = claim_due("holder", 10, timezone.now(), keep=lambda selected: selected[::2])
    assert claim.ids == [rows[0].pk, rows[2].pk, rows[4].pk]
    assert (claim.selected, claim.left) == (5, 2), "five looked at, two left: not drained"
    assert set(Outbox.objects.filter(status=Status.PENDING).values_list("pk", flat=True)) == {
        rows[1].pk,
        rows[3].pk,
    }


def test_a_batch_holds_every_row_of_the_listings_it_can_recheck(frozen):
    from outbox.dispatch import _within
    from outbox.queue import select_due

    # 13 lone listings' rows, then 200 rows of one crowded listing, then 3 more lone ones:
    # with 15 re-checks the batch takes the 13, the crowd's 200 (one re-check between them)
    # and one more lone listing, and stops before the row that would need a 16th.
    lone = [enqueue_for(_watch()) for _ in range(13)]
    crowd = _watch()
    for _ in range(200):
        enqueue_for(WatchFactory(listing=crowd.listing, target_price=950))
    for _ in range(3):
        enqueue_for(_watch())
    selected = select_due(timezone.now(), 500)
    assert len(selected) == len(lone) + 203
    assert len(_within(15)(selected)) == 13 + 200 + 1
    assert _within(1)(selected) == selected[:1]


def test_lease_recovery_fails_a_row_at_the_cap(recording_channel, settings, frozen):
    settings.OUTBOX_MAX_RETRY = 2
    row = enqueue_for(_watch())
    Outbox.objects.filter(pk=row.pk).update(retry_count=2)
    transition(
        [row.pk],
        Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "dead", "claimed_at": NOW}),
    )
    frozen.shift(dt.timedelta(hours=1))

    run_cycle()

    assert (_reload(row).status, _reload(row).reason) == (Status.FAILED, Reason.LEASE_EXPIRED)


def test_not_yet_due_retries_do_not_starve_pending_rows(recording_channel):
    listing = ListingFactory(price=900)
    device = DeviceFactory()
    old = NOW - dt.timedelta(days=1)
    retry_rows = []
    for _ in range(300):
        watch = WatchFactory(listing=listing, device=device, target_price=950)
        retry_rows.append(enqueue_for(watch, detected_at=old))
    Outbox.objects.filter(pk__in=[r.pk for r in retry_rows]).update(
        status=Status.RETRY, next_attempt_at=NOW + dt.timedelta(minutes=10), created_at=old
    )
    pending = [
        enqueue_for(WatchFactory(listing=listing, device=device, target_price=950))
        for _ in range(10)
    ]

    out = StringIO()
    call_command("dispatch_outbox", "--limit", "10", "--json", stdout=out)

    assert json.loads(out.getvalue())["sent"] == 10
    assert {r.status for r in Outbox.objects.filter(pk__in=[p.pk for p in pending])} == {
        Status.SENT
    }
    assert Outbox.objects.filter(status=Status.RETRY).count() == 300


def test_one_bad_row_never_stops_the_cycle(recording_channel, settings):
    settings.OUTBOX_CHANNEL_CLASSES = {
        **settings.OUTBOX_CHANNEL_CLASSES,
        "broken": "builtins.object",
    }
    good = enqueue_for(_watch())
    bad_watch = _watch()
    bad = enqueue_for(bad_watch)
    Outbox.objects.filter(pk=bad.pk).update(channel="broken")

    result = run_cycle()

    assert _reload(good).status == Status.SENT
    assert (_reload(bad).status, _reload(bad).reason) == (Status.RETRY, Reason.DELIVER_SERVER)
    assert result.by_status[Status.SENT] == 1 and result.by_status[Status.RETRY] == 1


def test_cycle_is_recorded_for_staff(recording_channel):
    enqueue_for(_watch())
    run_cycle()
    run = DispatchRun.objects.get()
    assert (run.claimed, run.sent, run.error) == (1, 1, "")


def test_dispatch_outbox_json_prints_exactly_the_counts(recording_channel):
    enqueue_for(_watch())
    out = StringIO()
    call_command("dispatch_outbox", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "sent": 1,
        "dropped": 0,
        "retry": 0,
        "failed": 0,
        "recovered": 0,
    }


def test_dispatch_outbox_plain_output(recording_channel):
    out = StringIO()
    call_command("dispatch_outbox", stdout=out)
    assert out.getvalue().strip() == "sent=0 dropped=0 retry=0 failed=0 recovered=0"


def test_dispatch_outbox_rejects_a_bad_limit():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="at least 1"):
        call_command("dispatch_outbox", "--limit", "0")


def test_nothing_due_does_nothing(recording_channel):
    row = enqueue_for(_watch())
    Outbox.objects.filter(pk=row.pk).update(
        next_attempt_at=timezone.now() + dt.timedelta(minutes=1)
    )
    assert run_cycle().as_json() == {
        "sent": 0,
        "dropped": 0,
        "retry": 0,
        "failed": 0,
        "recovered": 0,
    }


def test_a_per_unit_target_is_told_in_unit_prices(recording_channel):
    listing = ListingFactory(price=900, units_per_pack=12, unit_label="roll")
    watch = WatchFactory(listing=listing, target_price=80, use_unit_price=True)
    enqueue_for(watch, price=900)

    run_cycle()

    ((_, message),) = recording_channel.delivered
    assert message.body == "Now ¥75.00 per roll (¥900 a pack) — at or below your ¥80."
    watch.refresh_from_db()
    assert watch.last_notified_price == Decimal("75.00")
