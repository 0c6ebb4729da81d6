"""Exactly once under real timing (issue 11), in one process: every time the dispatcher
writes is the time of what it records; a re-fetch is at most OUTBOX_REFETCH_MAX_AGE old when
it is sent from; the lease is renewed while a batch is worked on, refused at start-up when
the heartbeat could not keep ahead of a delivery, and gates a delivery it could not cover;
one notification per watch and channel in flight, enforced by the database; a delivery that
may have happened unrecorded says so. The same with several processes is in
tests/reliability/test_live_timing.py."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from demo.models import DemoProduct
from outbox import claims
from outbox.claims import claim_due, recover_expired_leases
from outbox.dispatch import run_cycle
from outbox.lease import Lease, check_settings
from outbox.models import Outbox, OutboxEvent, Reason, Status
from outbox.queue import Candidate, DueRow
from outbox.transitions import Fence, renew_lease
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.outbox_helpers import enqueue_for
from tests.reliability.world import demo_listings, due_rows, subscribed_devices

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
# What a heartbeat writes (`outbox.transitions.renew_lease`): the lease and the intent.
BEAT_WRITES = ("claimed_at", "attempt_started_at")


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def _reload(row_id: int) -> Outbox:
    return Outbox.objects.get(pk=row_id)


# --- (3) every time is the time of the thing it records -------------------------------------


def test_times_are_those_of_the_claim_the_answer_and_the_receipt(push_service, frozen, settings):
    """Two rows, one per batch: the first delivery takes 40 s (the push service is slow), so
    the second batch is claimed 40 s into the cycle and its 429 is answered later still."""
    settings.OUTBOX_BATCH_SIZE = 1
    devices = subscribed_devices(push_service, 2)
    first, second = due_rows(devices, demo_listings(2), 2)
    push_service.answer(201, before=lambda: frozen.shift(dt.timedelta(seconds=40)))
    push_service.answer(429, "slow down", {"Retry-After": "60"}, before=lambda: frozen.shift(5))

    run_cycle()

    sent, retried = _reload(first), _reload(second)
    assert sent.status == Status.SENT
    received = {r.answered: r for r in push_service.received}
    receipt = dt.datetime.fromtimestamp(received[201].answered_at, dt.UTC)
    assert abs((sent.sent_at - receipt).total_seconds()) <= 1, "sent_at is the answer's time"
    assert retried.status == Status.RETRY
    claimed = NOW + dt.timedelta(seconds=40)
    assert abs((retried.claimed_at - claimed).total_seconds()) <= 1, "claimed_at is the claim's"
    answered = dt.datetime.fromtimestamp(received[429].answered_at, dt.UTC)
    assert retried.next_attempt_at >= answered + dt.timedelta(seconds=60)


def test_a_pinned_now_still_works_for_what_is_due_when(recording_channel, frozen):
    row = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    later = NOW + dt.timedelta(minutes=5)

    run_cycle(now=later)

    assert _reload(row.pk).sent_at == later


# --- (4) a re-fetch is at most OUTBOX_REFETCH_MAX_AGE old -----------------------------------


def test_a_value_older_than_the_bound_is_fetched_again_before_a_send(
    recording_channel, frozen, settings
):
    """Two rows on one listing, one per batch; the first delivery takes 31 s and the price
    moves meanwhile: the second row is sent from a new re-fetch, not the 31 s old one."""
    settings.OUTBOX_BATCH_SIZE = 1
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    listing = ListingFactory(price=900)
    first = enqueue_for(WatchFactory(listing=listing, target_price=950))
    second = enqueue_for(WatchFactory(listing=listing, target_price=950))

    def slow_and_the_price_moves():
        frozen.shift(dt.timedelta(seconds=31))
        DemoProduct.objects.filter(item_code=listing.item_code).update(price=870)

    recording_channel.during = slow_and_the_price_moves
    run_cycle()

    told = {row_id: message.price for row_id, message in recording_channel.delivered}
    assert told == {first.pk: 900, second.pk: 870}
    ages = [
        e.data["fresh_age_seconds"]
        for e in OutboxEvent.objects.filter(outbox_id__in=[first.pk, second.pk], reason="delivered")
    ]
    assert ages == [0, 0]


@pytest.mark.parametrize(("later_price", "outcome"), [(1200, "dropped"), (880, "sent")])
def test_a_later_delivery_of_a_batch_is_judged_again_on_a_fresh_value_not_held_back(
    recording_channel, frozen, settings, later_price, outcome
):
    """Two rows on one listing in one batch, one delivery at a time; the first takes 31 s and
    the price moves meanwhile. The second is not sent from the value fetched 31 s before,
    and it is not retried for the first one's slowness either: right before it is handed
    over its listing is asked again, and it is judged on that answer in the same cycle —
    dropped when the price rose past the line, sent with the new price when it still holds."""
    settings.OUTBOX_REFETCH_MAX_AGE = 30
    settings.OUTBOX_DELIVERY_WORKERS = 1
    listing = ListingFactory(price=900)
    first = enqueue_for(WatchFactory(listing=listing, target_price=950))
    second = enqueue_for(WatchFactory(listing=listing, target_price=950))
    assert first.device_id != second.device_id, "two messages, not one digest"

    def slow_and_the_price_moves():
        if not recording_channel.sends:
            frozen.shift(dt.timedelta(seconds=31))
            DemoProduct.objects.filter(item_code=listing.item_code).update(price=later_price)

    recording_channel.during = slow_and_the_price_moves
    run_cycle()

    told = {row_id: m.price for row_id, m in recording_channel.delivered}
    later = _reload(second.pk)
    assert (later.retry_count, later.attempts) == (0, 1)
    assert not later.events.filter(reason=Reason.FRESH_VALUE_EXPIRED).exists()
    if outcome == "dropped":
        assert told == {first.pk: 900}
        assert (later.status, later.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
        assert later.events.get(reason=Reason.CONDITION_LOST).data["fresh"]["price"] == 1200
    else:
        assert told == {first.pk: 900, second.pk: 880}
        assert later.status == Status.SENT
        assert later.events.get(reason=Reason.DELIVERED).data["fresh_age_seconds"] == 0


def _reused_and_asked(settings, monkeypatch, frozen, reused_price, slow=(10,), *, one_device=False):
    """Row A's listing was polled 25 s before the cycle (its observation is reused, no
    request); row B's must be asked. The demo marketplace then says `reused_price` for A's
    listing. Each call to the marketplace takes the next of `slow` seconds (the last one
    again after them). The rows are two messages, or one digest with `one_device`. Returns
    the two rows and the item codes asked for, call by call."""
    from watches import services

    settings.OUTBOX_REFETCH_MAX_AGE = 30
    reused = ListingFactory(price=900, last_polled_at=NOW - dt.timedelta(seconds=25))
    asked = ListingFactory(price=900)
    device = {"device": DeviceFactory()} if one_device else {}
    row_a = enqueue_for(WatchFactory(listing=reused, target_price=950, **device))
    row_b = enqueue_for(WatchFactory(listing=asked, target_price=950, **device))
    assert (row_a.device_id == row_b.device_id) == one_device
    DemoProduct.objects.filter(item_code=reused.item_code).update(price=reused_price)
    fetch, calls = services.fetch, []

    def slow_fetch(source, codes):
        frozen.shift(dt.timedelta(seconds=slow[min(len(calls), len(slow) - 1)]))
        calls.append(list(codes))
        return fetch(source, codes)

    monkeypatch.setattr(services, "fetch", slow_fetch)
    return row_a, row_b, reused.item_code, calls


def test_a_reused_observation_aged_past_the_bound_by_slow_refetches_is_not_sent(
    recording_channel, frozen, settings, monkeypatch
):
    """Asking for B's listing takes 10 s; by then A's reused value is 35 s old. A is not
    sent from it: right before the deliveries are handed over its listing is asked (once),
    says ¥1,200, and A is dropped in the same cycle, without a retry."""
    row_a, row_b, code_a, calls = _reused_and_asked(settings, monkeypatch, frozen, 1200)

    run_cycle()

    assert {row_id: m.price for row_id, m in recording_channel.delivered} == {row_b.pk: 900}
    dropped = _reload(row_a.pk)
    assert (dropped.status, dropped.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert (dropped.retry_count, dropped.attempts) == (0, 1)
    assert not dropped.events.filter(reason=Reason.FRESH_VALUE_EXPIRED).exists()
    assert [code for codes in calls for code in codes].count(code_a) == 1


def test_a_reused_value_that_still_holds_goes_out_in_the_same_cycle_from_a_fresh_answer(
    recording_channel, frozen, settings, monkeypatch
):
    """As above, with A's price still under the line (¥880 now): A goes out, told the price
    its listing was just asked for, in its first attempt."""
    row_a, row_b, code_a, calls = _reused_and_asked(settings, monkeypatch, frozen, 880)

    run_cycle()

    told = {row_id: m.price for row_id, m in recording_channel.delivered}
    assert told == {row_b.pk: 900, row_a.pk: 880}
    sent = _reload(row_a.pk)
    assert (sent.status, sent.retry_count, sent.attempts) == (Status.SENT, 0, 1)
    assert [e.reason for e in sent.events.order_by("id")] == [Reason.CLAIMED, Reason.DELIVERED]
    assert sent.events.get(reason=Reason.DELIVERED).data["fresh_age_seconds"] == 10.0
    assert calls == [[row_b.watch.listing.item_code], [code_a]]


def test_a_value_asked_anew_that_grows_too_old_again_waits_its_backoff_counted(
    recording_channel, frozen, settings, monkeypatch
):
    """A's reused value is too old by the time the deliveries are handed over, so its listing
    is asked again — and that answer takes 31 s to come: a slow marketplace, not a slow
    channel, so A waits its backoff and the retry counts. (B, whose value aged while A's
    was asked, goes back for the next step once; asked again, it is just as slow.)"""
    row_a, row_b, code_a, calls = _reused_and_asked(settings, monkeypatch, frozen, 880, (10, 31))

    run_cycle()

    for row in (row_a, row_b):
        held = _reload(row.pk)
        assert (held.status, held.reason) == (Status.RETRY, Reason.FRESH_VALUE_EXPIRED)
        assert (held.retry_count, held.attempts) == (1, 1)
        expired = held.events.get(reason=Reason.FRESH_VALUE_EXPIRED)
        assert expired.data["fresh_age_seconds"] == 31.0
        assert held.next_attempt_at == timezone.now() + dt.timedelta(seconds=30)
    assert recording_channel.delivered == []
    asked = [code for codes in calls for code in codes]
    assert asked.count(code_a) == 1
    assert asked.count(row_b.watch.listing.item_code) == 2


@pytest.mark.parametrize("marketplace", ["quick", "slow"])
def test_a_delivery_that_aged_behind_a_slow_one_goes_back_for_the_next_step_once(
    recording_channel, frozen, settings, monkeypatch, marketplace
):
    """One delivery at a time, three rows. The first step's delivery takes 1 s, so the next
    step hands over the two others (the channel takes ten in a third of the bound); the
    first of them takes 31 s. The last one's
    value, young when the step began, is 31 s old when its turn comes: it aged waiting for
    the channel, so it goes back for the next step, which asks its listing again — and it
    goes out, uncounted. When that answer itself takes 31 s to come (the marketplace is
    slow), the row waits its backoff, counted: a delivery goes back once."""
    from watches import services

    settings.OUTBOX_REFETCH_MAX_AGE = 30
    settings.OUTBOX_DELIVERY_WORKERS = 1
    rows = [
        enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
        for _ in range(3)
    ]
    shifts = iter([1, 31])
    recording_channel.during = lambda: frozen.shift(dt.timedelta(seconds=next(shifts, 0)))
    fetch, calls = services.fetch, []

    def counted(source, codes):
        if calls and marketplace == "slow":
            frozen.shift(dt.timedelta(seconds=31))
        calls.append(list(codes))
        return fetch(source, codes)

    monkeypatch.setattr(services, "fetch", counted)
    run_cycle()

    last = _reload(rows[2].pk)
    assert [row_id for row_id, _ in recording_channel.delivered][:2] == [rows[0].pk, rows[1].pk]
    assert len(calls) == 2, "the batch's listings once, then the last row's again"
    assert calls[1] == [last.watch.listing.item_code]
    if marketplace == "quick":
        assert (last.status, last.retry_count, last.attempts) == (Status.SENT, 0, 1)
        assert last.events.get(reason=Reason.DELIVERED).data["fresh_age_seconds"] == 0
    else:
        assert (last.status, last.reason) == (Status.RETRY, Reason.FRESH_VALUE_EXPIRED)
        assert (last.retry_count, last.attempts) == (1, 1)
        assert last.events.get(reason=Reason.FRESH_VALUE_EXPIRED).data["fresh_age_seconds"] == 31


def test_a_digest_with_a_reused_value_grown_too_old_goes_out_whole_in_the_same_cycle(
    recording_channel, frozen, settings, monkeypatch
):
    """A and B are one device's, so one digest: A's value is a poll's observation (reused),
    B's listing is asked and takes 10 s. By then A's value is 35 s old, so right before the
    digest is handed over A's listing is asked again; B's answer (20 s old by the gate)
    still serves, and the digest goes out whole, once, in the rows' first attempt."""
    row_a, row_b, code_a, calls = _reused_and_asked(
        settings, monkeypatch, frozen, 880, one_device=True
    )

    run_cycle()

    told = {row_id: m.price for row_id, m in recording_channel.delivered}
    assert told == {row_a.pk: 880, row_b.pk: 900}
    assert len(recording_channel.sends) == 1, "one digest, sent once"
    for row in (row_a, row_b):
        sent = _reload(row.pk)
        assert (sent.status, sent.retry_count, sent.attempts) == (Status.SENT, 0, 1)
    ages = {
        e.outbox_id: e.data["fresh_age_seconds"]
        for e in OutboxEvent.objects.filter(reason=Reason.DELIVERED)
    }
    assert ages == {row_a.pk: 10.0, row_b.pk: 20.0}
    assert calls == [[row_b.watch.listing.item_code], [code_a]]


@pytest.mark.parametrize("kind", ["listing", "product"])
def test_an_answer_reused_from_an_earlier_batch_grown_too_old_is_asked_again_at_once(
    recording_channel, frozen, settings, monkeypatch, kind
):
    """Batches of two, one delivery at a time. Batch 1 asks for X (a listing, or a product's
    offers) for its first row and takes 20 s to deliver. Batch 2 reuses that answer for its
    second row of X (20 s old) and first delivers a row whose value takes 15 s to send: by
    the gate X's value is 35 s old. It aged waiting for the channel: the delivery goes back
    for the next step, which asks for X once more and sends from that answer, uncounted."""
    from demo.seed import seed_demo
    from watches import services
    from watches.models import Product
    from watches.pages.watchlist import WatchParams
    from watches.products.watches import save_product_watch

    settings.OUTBOX_REFETCH_MAX_AGE = 30
    settings.OUTBOX_BATCH_SIZE = 2
    settings.OUTBOX_DELIVERY_WORKERS = 1
    if kind == "product":
        seed_demo()
        product = Product.objects.get(offers__item_code="tp-scottie-12r")
        params = WatchParams(trigger="target_price", target_price=5000)

        def watch_x():
            made, _ = save_product_watch(DeviceFactory(), product, params)
            return made

        def times_asked(answers_by_batch):
            return sum(product.pk in asked for asked in answers_by_batch)

        asked, ask = [], services.refetch_products

        def counted_products(products, now, **kwargs):
            products = list(products)
            asked.append({p.pk for p in products})
            return ask(products, now, **kwargs)

        monkeypatch.setattr(services, "refetch_products", counted_products)
    else:
        x = ListingFactory(price=900)

        def watch_x():
            return WatchFactory(listing=x, target_price=950)

        def times_asked(answers_by_batch):
            return sum(x.item_code in codes for codes in answers_by_batch)

        asked, fetch = [], services.fetch

        def counted(source, codes):
            asked.append(list(codes))
            return fetch(source, codes)

        monkeypatch.setattr(services, "fetch", counted)
    first = enqueue_for(watch_x())
    filler = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    slow = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    second = enqueue_for(watch_x())
    shifts = iter([20, 0, 15])
    recording_channel.during = lambda: frozen.shift(next(shifts, 0))

    run_cycle()

    told = [row_id for row_id, _ in recording_channel.delivered]
    assert told == [first.pk, filler.pk, slow.pk, second.pk]
    sent = _reload(second.pk)
    assert (sent.status, sent.retry_count, sent.attempts) == (Status.SENT, 0, 1)
    assert not sent.events.filter(reason=Reason.FRESH_VALUE_EXPIRED).exists()
    assert sent.events.get(reason=Reason.DELIVERED).data["fresh_age_seconds"] == 0.0
    assert times_asked(asked) == 2, "asked in batch 1, and again for the held row"


def test_a_refetch_kept_after_a_later_poll_does_not_become_the_next_dispatchers_value(
    recording_channel, frozen, settings, monkeypatch
):
    """A dispatcher asks at NOW (¥900); before it keeps the answer, the price rises and a poll
    five seconds later keeps ¥1,200. A second dispatcher 20 s after NOW reuses the listing's
    state as its re-fetch: it must be the poll's ¥1,200 (above the line: dropped), not the
    ¥900 kept last."""
    from watches import services
    from watches.models import Listing
    from watches.polling.poll import poll

    settings.OUTBOX_REFETCH_MAX_AGE = 30
    listing = ListingFactory(price=900)
    asked = services.fetch

    def a_poll_keeps_a_later_answer_first(source, codes):
        answers = asked(source, codes)
        DemoProduct.objects.filter(item_code=listing.item_code).update(price=1200)
        frozen.shift(dt.timedelta(seconds=5))
        poll(codes=[listing.item_code])
        return answers

    monkeypatch.setattr(services, "fetch", a_poll_keeps_a_later_answer_first)
    services.refetch([Listing.objects.get(pk=listing.pk)], NOW)
    monkeypatch.setattr(services, "fetch", asked)
    listing.refresh_from_db()
    assert (listing.price, listing.last_polled_at) == (1200, NOW + dt.timedelta(seconds=5))

    frozen.move_to(NOW + dt.timedelta(seconds=20))
    row = enqueue_for(WatchFactory(listing=listing, target_price=950))
    run_cycle()

    assert recording_channel.delivered == []
    assert (_reload(row.pk).status, _reload(row.pk).reason) == (
        Status.DROPPED,
        Reason.CONDITION_LOST,
    )


def test_a_value_within_the_bound_is_fetched_once_per_cycle(recording_channel, frozen, settings):
    settings.OUTBOX_BATCH_SIZE = 1
    listing = ListingFactory(price=900)
    rows = [enqueue_for(WatchFactory(listing=listing, target_price=950)) for _ in range(2)]
    recording_channel.during = lambda: frozen.shift(dt.timedelta(seconds=10))

    run_cycle()

    ages = sorted(
        e.data["fresh_age_seconds"]
        for e in OutboxEvent.objects.filter(outbox_id__in=[r.pk for r in rows], reason="delivered")
    )
    assert ages == [0, 10], "the second batch reused the first batch's answer, 10 s old"


# --- the lease ------------------------------------------------------------------------------


def test_a_lease_shorter_than_the_heartbeat_needs_stops_start_up(settings):
    settings.WEBPUSH_CONNECT_TIMEOUT, settings.WEBPUSH_READ_TIMEOUT = 5, 10
    settings.EMAIL_TIMEOUT = 10
    settings.OUTBOX_LEASE_SECONDS = 34
    with pytest.raises(ImproperlyConfigured) as refused:
        check_settings()
    assert "2 × the longest delivery 15" in str(refused.value)
    assert "+ margin 5 = 35 seconds" in str(refused.value)
    settings.OUTBOX_LEASE_SECONDS = 35
    check_settings()
    settings.EMAIL_TIMEOUT = 20  # a slow mail server is the longest delivery
    with pytest.raises(ImproperlyConfigured, match="= 45 seconds"):
        check_settings()


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_moves_claimed_at_forward_while_a_batch_is_worked_on(
    recording_channel, settings
):
    settings.WEBPUSH_CONNECT_TIMEOUT, settings.WEBPUSH_READ_TIMEOUT = 0.5, 0.5
    settings.EMAIL_TIMEOUT = 1
    settings.OUTBOX_LEASE_SECONDS = 7  # beats every (7 - 1 - 5) / 2 = 0.5 s
    row = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    seen: list[dt.datetime] = []

    def slow():
        for _ in range(3):
            time.sleep(0.6)
            seen.append(Outbox.objects.values_list("claimed_at", flat=True).get(pk=row.pk))

    recording_channel.during = slow
    run_cycle()

    assert _reload(row.pk).status == Status.SENT
    assert seen == sorted(seen) and len(set(seen)) == 3, "each look found a later claimed_at"


def test_the_heartbeat_is_fenced_and_says_which_rows_are_still_held(frozen):
    rows = [
        enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
        for _ in range(2)
    ]
    claim = claim_due("mine", 10, timezone.now())
    attempts = dict(Outbox.objects.filter(pk__in=claim.ids).values_list("id", "attempts"))
    # The second row was taken over: another holder now.
    Outbox.objects.filter(pk=rows[1].pk).update(claimed_by="theirs")
    later = NOW + dt.timedelta(seconds=30)

    held = renew_lease(Fence("mine", attempts), later, starting=[rows[0].pk, rows[1].pk])

    assert held == {rows[0].pk}
    mine, theirs = _reload(rows[0].pk), _reload(rows[1].pk)
    assert (mine.claimed_at, mine.attempt_started_at) == (later, later)
    assert (theirs.claimed_at, theirs.attempt_started_at) == (NOW, None)


def test_no_index_of_the_outbox_table_covers_a_column_the_heartbeat_writes():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Outbox._meta.db_table)
    written = {Outbox._meta.get_field(name).column for name in BEAT_WRITES}
    indexed = {
        name: set(info["columns"]) & written
        for name, info in constraints.items()
        if info["index"] or info["unique"] or info["primary_key"]
    }
    assert "outbox_sending" in indexed, "the table's indexes were read"
    assert {name: hit for name, hit in indexed.items() if hit} == {}


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="heap-only tuples and fill factors are PostgreSQL's"
)
def test_the_heartbeat_rewrites_its_rows_in_place_on_postgresql(frozen):
    for _ in range(3):
        enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    claim = claim_due("mine", 10, timezone.now())
    attempts = dict(Outbox.objects.filter(pk__in=claim.ids).values_list("id", "attempts"))
    table = Outbox._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [table])
        assert "fillfactor=80" in cursor.fetchone()[0]
        counts = (
            "SELECT pg_stat_get_xact_tuples_updated(%s::regclass), "
            "pg_stat_get_xact_tuples_hot_updated(%s::regclass)"
        )
        cursor.execute(counts, [table, table])
        before = cursor.fetchone()
        held = renew_lease(Fence("mine", attempts), NOW + dt.timedelta(seconds=30), starting=[])
        # This transaction's own counts (the test runs inside one), the beat's alone.
        cursor.execute(counts, [table, table])
        after = cursor.fetchone()
    updated, in_place = after[0] - before[0], after[1] - before[1]
    assert held == set(claim.ids) and len(held) == 3
    assert updated == 3 and in_place == 3


def test_the_send_gate_refuses_a_row_no_longer_held_or_without_a_delivery_of_lease_left(
    settings,
):
    settings.WEBPUSH_CONNECT_TIMEOUT, settings.WEBPUSH_READ_TIMEOUT = 5, 10
    settings.OUTBOX_LEASE_SECONDS = 300
    lease = Lease("mine", {1: 1, 2: 1}, timezone.now)
    assert lease.may_start(1)
    assert not lease.may_start(3), "never claimed by this batch"
    lease.held = frozenset({2})
    assert not lease.may_start(1), "taken over"
    settings.OUTBOX_LEASE_SECONDS = 19  # less than a delivery (15 s) + the margin (5 s) left
    assert not Lease("mine", {1: 1}, timezone.now).may_start(1)


# --- (5) a delivery that may have happened unrecorded ---------------------------------------


def test_an_expired_lease_after_the_delivery_started_marks_may_have_been_delivered(frozen):
    started = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    idle = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    claim = claim_due("dead", 10, timezone.now())
    attempts = dict(Outbox.objects.filter(pk__in=claim.ids).values_list("id", "attempts"))
    renew_lease(Fence("dead", attempts), timezone.now(), starting=[started.pk])

    frozen.shift(dt.timedelta(seconds=301))
    assert recover_expired_leases(timezone.now()) == 2

    maybe, plain = _reload(started.pk), _reload(idle.pk)
    assert (maybe.status, maybe.maybe_delivered) == (Status.RETRY, True)
    assert (plain.status, plain.maybe_delivered) == (Status.RETRY, False)
    event = maybe.events.get(reason=Reason.LEASE_EXPIRED)
    assert event.data["may_have_been_delivered"] is True
    assert "may have been delivered" in event.detail
    assert "may_have_been_delivered" not in plain.events.get(reason=Reason.LEASE_EXPIRED).data
    # The next claim starts a new attempt: its intent is not yet written.
    frozen.shift(dt.timedelta(minutes=31))
    claim_due("next", 10, timezone.now())
    assert _reload(started.pk).attempt_started_at is None
    assert _reload(started.pk).maybe_delivered is True, "the mark stays"


def test_admin_lists_rows_that_may_have_been_delivered(admin_client):
    rows = [
        enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
        for _ in range(2)
    ]
    Outbox.objects.filter(pk=rows[0].pk).update(maybe_delivered=True)

    response = admin_client.get("/admin/outbox/outbox/", {"maybe_delivered": "yes"})

    assert response.status_code == 200
    listed = [row.pk for row in response.context["cl"].result_list]
    assert listed == [rows[0].pk]


# --- one in flight per watch and channel ----------------------------------------------------


def test_the_database_refuses_a_second_row_in_flight_for_a_watch_and_channel(frozen):
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    newer = enqueue_for(watch, detected_at=NOW)
    Outbox.objects.filter(pk=older.pk).update(status=Status.SENDING)
    with pytest.raises(IntegrityError), transaction.atomic():
        Outbox.objects.filter(pk=newer.pk).update(status=Status.SENDING)


def test_a_claim_takes_the_newest_of_a_backlog_and_supersedes_the_rest(frozen):
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    backlog = [enqueue_for(watch, detected_at=NOW - dt.timedelta(days=d)) for d in range(5)]
    other = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))

    claim = claim_due("h", 10, timezone.now())

    assert sorted(claim.ids) == sorted([backlog[0].pk, other.pk])
    assert claim.superseded == 4
    for row in backlog[1:]:
        assert (_reload(row.pk).status, _reload(row.pk).reason) == (
            Status.DROPPED,
            Reason.SUPERSEDED,
        )


def test_a_detection_newer_than_the_one_told_still_goes_out(frozen):
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=2))
    newest = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    Outbox.objects.filter(pk=newest.pk).update(status=Status.SENT)
    today = enqueue_for(watch, detected_at=NOW)

    claim = claim_due("h", 10, timezone.now())

    assert claim.ids == [today.pk], "a detection newer than what was told still goes out"
    assert (_reload(older.pk).status, _reload(older.pk).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    )


def test_a_backlog_behind_a_sent_row_is_superseded_by_it(frozen):
    """What a third dispatcher's lock can leave behind on PostgreSQL: the newest row of a
    backlog went out while an older one was locked elsewhere, so not superseded then."""
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=2))
    sent = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    Outbox.objects.filter(pk=sent.pk).update(status=Status.SENT)

    claim = claim_due("h", 10, timezone.now())

    assert (claim.ids, claim.superseded) == ([], 1)
    assert _reload(older.pk).events.last().data == {"superseded_by": sent.pk}


def test_a_backlog_behind_a_newer_row_waiting_for_its_retry_is_superseded_by_it(frozen):
    """The newer detection goes out when its retry is due, judged on the newest value; the
    older one claimed now would tell the same news first, and then the newer one again."""
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    waiting = enqueue_for(watch, detected_at=NOW - dt.timedelta(hours=1))
    Outbox.objects.filter(pk=waiting.pk).update(
        status=Status.RETRY, next_attempt_at=NOW + dt.timedelta(minutes=5)
    )

    claim = claim_due("h", 10, timezone.now())

    assert (claim.ids, claim.superseded) == ([], 1)
    assert _reload(older.pk).events.last().data == {"superseded_by": waiting.pk}
    assert _reload(waiting.pk).status == Status.RETRY


def test_a_row_waiting_for_its_retry_does_not_hold_back_a_newer_due_one(frozen):
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    waiting = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    Outbox.objects.filter(pk=waiting.pk).update(
        status=Status.RETRY, next_attempt_at=NOW + dt.timedelta(minutes=5)
    )
    newer = enqueue_for(watch, detected_at=NOW)

    claim = claim_due("h", 10, timezone.now())

    assert claim.ids == [newer.pk]
    assert _reload(waiting.pk).status == Status.RETRY, "superseded once the newer one is sent"


def test_detections_either_side_of_midnight_both_retried_are_told_once(recording_channel):
    """23:59:50 and 00:00:05 in Tokyo: two day slots, both failing once on a marketplace
    5xx. The older one comes due first, while the newer waits for its retry: it gives way."""
    midnight_less_10s = dt.datetime(2026, 11, 29, 14, 59, 50, tzinfo=dt.UTC)
    with time_machine.travel(midnight_less_10s, tick=False) as clock:
        watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
        demo = DemoProduct.objects.filter(item_code=watch.listing.item_code)
        older = enqueue_for(watch, price=900)
        demo.update(fault="server")
        run_cycle()  # older: retry, due 30 s later
        clock.shift(dt.timedelta(seconds=15))
        newer = enqueue_for(watch, price=900)
        run_cycle()  # newer claimed alone (older not due yet): retry
        assert _reload(newer.pk).status == Status.RETRY
        demo.update(fault="")
        clock.shift(dt.timedelta(seconds=16))  # only the older row is due
        run_cycle()
        clock.shift(dt.timedelta(seconds=15))  # the newer one is due
        run_cycle()

    assert [row_id for row_id, _ in recording_channel.delivered] == [newer.pk]
    assert (_reload(older.pk).status, _reload(older.pk).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    )


def test_a_claim_racing_another_dispatcher_for_the_same_watch_leaves_it_to_that_one(
    frozen, monkeypatch
):
    """The race PostgreSQL allows (both select before either commits), played on one
    connection: the claim's select is handed a row whose watch is already in flight."""
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    flying = enqueue_for(watch, detected_at=NOW - dt.timedelta(hours=1))
    Outbox.objects.filter(pk=flying.pk).update(status=Status.SENDING, claimed_by="theirs")
    free = enqueue_for(WatchFactory(listing=ListingFactory(price=900), target_price=950))
    stale = [
        Candidate(DueRow(r.pk, r.watch_id, r.channel, r.detected_at), backlog=False)
        for r in (older, free)
    ]
    monkeypatch.setattr(claims, "select_due", lambda now, limit: stale)

    claim = claim_due("mine", 10, timezone.now())

    assert claim.ids == [free.pk]
    assert _reload(flying.pk).claimed_by == "theirs"
    assert (_reload(older.pk).status, _reload(older.pk).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    ), "older than the one in flight"


def test_a_backlog_whose_newest_row_goes_out_while_the_claim_reads_it_is_superseded(
    frozen, monkeypatch
):
    """The race four dispatchers met on PostgreSQL, played on one connection: the claim
    selected an older row while the newest was still due; another dispatcher claimed the
    newest before the claim read the backlog, and sent it before the claim's UPDATE — which
    the in-flight index no longer stopped. The older row must be superseded, not claimed
    (claimed, its re-check would drop it `already_notified`: told nothing twice, but told
    staff the wrong reason)."""
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    newest = enqueue_for(watch, detected_at=NOW - dt.timedelta(hours=1))
    stale = [Candidate(DueRow(older.pk, watch.pk, older.channel, older.detected_at), True)]
    monkeypatch.setattr(claims, "select_due", lambda now, limit: stale)
    Outbox.objects.filter(pk=newest.pk).update(status=Status.SENDING, claimed_by="theirs")
    read_siblings = claims.select_due_siblings

    def then_they_send(now, watch_ids):
        siblings = read_siblings(now, watch_ids)
        Outbox.objects.filter(pk=newest.pk).update(status=Status.SENT)
        return siblings

    monkeypatch.setattr(claims, "select_due_siblings", then_they_send)

    claim = claim_due("mine", 10, timezone.now())

    assert (claim.ids, claim.superseded) == ([], 1)
    assert (_reload(older.pk).status, _reload(older.pk).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    )
    assert _reload(older.pk).events.last().data == {"superseded_by": newest.pk}


@pytest.mark.parametrize("sent_before_our_update", [False, True])
def test_a_detection_newer_than_the_row_in_flight_is_never_superseded_by_it(
    frozen, monkeypatch, sent_before_our_update
):
    """Same race, with a detection newer than the row the other dispatcher holds: it still
    goes out — now if that row was sent meanwhile, after it otherwise — and only the older
    row gives way."""
    watch = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    older = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=2))
    flying = enqueue_for(watch, detected_at=NOW - dt.timedelta(days=1))
    newer = enqueue_for(watch, detected_at=NOW)
    stale = [
        Candidate(DueRow(r.pk, watch.pk, r.channel, r.detected_at), True) for r in (older, newer)
    ]
    monkeypatch.setattr(claims, "select_due", lambda now, limit: stale)
    Outbox.objects.filter(pk=flying.pk).update(status=Status.SENDING, claimed_by="theirs")
    read_siblings = claims.select_due_siblings

    def siblings_then(now, watch_ids):
        siblings = read_siblings(now, watch_ids)
        if sent_before_our_update:
            Outbox.objects.filter(pk=flying.pk).update(status=Status.SENT)
        return siblings

    monkeypatch.setattr(claims, "select_due_siblings", siblings_then)

    claim = claim_due("mine", 10, timezone.now())

    assert claim.ids == ([newer.pk] if sent_before_our_update else [])
    assert _reload(newer.pk).status == (
        Status.SENDING if sent_before_our_update else Status.PENDING
    )
    assert (_reload(older.pk).status, _reload(older.pk).reason) == (
        Status.DROPPED,
        Reason.SUPERSEDED,
    )
    superseded_by = newer.pk if sent_before_our_update else flying.pk
    assert _reload(older.pk).events.last().data == {"superseded_by": superseded_by}


def test_a_digest_whose_row_no_longer_holds_right_before_it_goes_out_is_sent_without_it(
    recording_channel, frozen, settings, monkeypatch
):
    """A and B are one device's digest; A's reused value is too old by the time it is handed
    over, and asked again it says ¥1,200: A is dropped, and B goes out alone, with its own
    message — nothing is told of A."""
    row_a, row_b, _, _ = _reused_and_asked(settings, monkeypatch, frozen, 1200, one_device=True)

    run_cycle()

    (message,) = recording_channel.sends
    assert not message.items and message.tag == recording_channel.delivered[0][1].tag
    assert [row_id for row_id, _ in recording_channel.delivered] == [row_b.pk]
    assert (_reload(row_a.pk).status, _reload(row_a.pk).reason) == (
        Status.DROPPED,
        Reason.CONDITION_LOST,
    )
    assert "digest" not in _reload(row_b.pk).sent_message
