"""A transaction the database ends to break a deadlock, or to keep transactions serializable,
is run again (`common.retrying`) — and every step of a dispatch cycle that writes is run
that way, so such a failure costs the step a pause, not the cycle (PostgreSQL: another
connection takes the row locks a step needs in the opposite order, and the step, which
waited first, is the deadlock's victim)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Model

from common.retrying import retrying, transient
from outbox.dispatch import run_cycle
from outbox.models import DispatchRun, Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.outbox_helpers import enqueue_for
from watches.models import Listing, Watch


def _lock(model: type[Model], pk: int) -> None:
    list(model._default_manager.select_for_update().filter(pk=pk).values_list("pk", flat=True))


def _wait_for_a_waiter(timeout: float = 10.0) -> None:
    """Until another connection to this database waits for a lock."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no other connection ever waited for a lock")


class Crossing(threading.Thread):
    """Another transaction, in its own connection: once `go` is set it locks `first`, says
    so (`held`), waits until someone waits for it, then locks `then` — the opposite order
    of the one waiting, which the database fails to break the deadlock (it waited first)."""

    def __init__(self, first: tuple[type[Model], int], then: tuple[type[Model], int]) -> None:
        super().__init__(daemon=True)
        self.first, self.then = first, then
        self.go, self.held = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            assert self.go.wait(30), "never told to go"
            with transaction.atomic():
                _lock(*self.first)
                self.held.set()
                _wait_for_a_waiter()
                _lock(*self.then)
        except BaseException as exc:
            self.error = exc
        finally:
            self.held.set()
            connection.close()


def _retried(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "common.retrying"]


# --- common.retrying ----------------------------------------------------------------------


def test_an_error_that_is_not_the_database_breaking_a_deadlock_is_raised_at_once():
    tries: list[int] = []

    def step() -> None:
        tries.append(1)
        raise IntegrityError("a unique violation is a fact, not a collision in time")

    with pytest.raises(IntegrityError):
        retrying(step)
    assert len(tries) == 1

    def busy() -> None:
        tries.append(1)
        raise OperationalError("database is locked")

    with pytest.raises(OperationalError):
        retrying(busy)
    assert len(tries) == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_transaction_ended_to_break_a_deadlock_runs_again_and_goes_through(caplog):
    first, second = ListingFactory(), ListingFactory()
    crossing = Crossing((Listing, second.pk), (Listing, first.pk))
    crossing.start()
    tries: list[int] = []

    def step() -> None:
        tries.append(1)
        with transaction.atomic():
            _lock(Listing, first.pk)
            crossing.go.set()
            assert crossing.held.wait(10)
            _lock(Listing, second.pk)  # waits for the crossing, which then waits for this

    with caplog.at_level(logging.WARNING, logger="common.retrying"):
        retrying(step)
    crossing.join(10)
    assert crossing.error is None
    assert len(tries) == 2
    assert ["deadlock detected" in m for m in _retried(caplog)] == [True]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_caller_opened_a_deadlock_is_the_callers_to_run_again():
    first, second = ListingFactory(), ListingFactory()
    crossing = Crossing((Listing, second.pk), (Listing, first.pk))
    crossing.start()
    tries: list[int] = []

    def step() -> None:
        tries.append(1)
        _lock(Listing, first.pk)
        crossing.go.set()
        assert crossing.held.wait(10)
        _lock(Listing, second.pk)

    with pytest.raises(OperationalError) as failure, transaction.atomic():
        retrying(step)
    crossing.join(10)
    assert transient(failure.value)
    assert len(tries) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_serialization_failure_runs_again_and_goes_through():
    listing = ListingFactory(price=1000)
    read, written = threading.Event(), threading.Event()
    tries: list[int] = []

    def writer() -> None:
        try:
            assert read.wait(10)
            Listing.objects.filter(pk=listing.pk).update(price=990)
        finally:
            written.set()
            connection.close()

    def step() -> None:
        tries.append(1)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            price = Listing.objects.get(pk=listing.pk).price  # the snapshot is taken here
            assert price is not None
            read.set()
            assert written.wait(10)
            Listing.objects.filter(pk=listing.pk).update(price=price - 20)

    thread = threading.Thread(target=writer)
    thread.start()
    retrying(step)
    thread.join(10)
    assert len(tries) == 2  # the first update met the writer's: could not serialize
    assert Listing.objects.get(pk=listing.pk).price == 970


# --- the dispatch cycle ------------------------------------------------------------------


def _two_due_rows() -> tuple[Outbox, Outbox]:
    """Two due rows of one device (a digest), each on its own watch and listing."""
    device = DeviceFactory()
    first, second = (
        enqueue_for(
            WatchFactory.create(
                listing=ListingFactory.create(price=900), device=device, target_price=950
            )
        )
        for _ in range(2)
    )
    return first, second


def _cycle_with(crossing: Crossing, caplog) -> DispatchRun:
    crossing.start()
    with caplog.at_level(logging.WARNING, logger="common.retrying"):
        run_cycle()
    crossing.join(10)
    assert crossing.error is None, crossing.error
    return DispatchRun.objects.get()


def _waits_for(crossing: Crossing) -> Callable[..., None]:
    """A hook of the outside world (a marketplace asked, a channel delivering): the crossing
    transaction takes its first lock now, before the cycle goes on."""

    def hook(*args):
        crossing.go.set()
        assert crossing.held.wait(10)
        return args[0] if args else None

    return hook


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_write_before_the_deliveries_survives_a_deadlock(ichiba, recording_channel, caplog):
    ichiba.add("shop:one", price=900)
    ichiba.add("shop:two", price=900)
    device = DeviceFactory()
    rows = [
        enqueue_for(
            WatchFactory(
                listing=ListingFactory(source="rakuten", item_code=code, price=900),
                device=device,
                target_price=950,
            )
        )
        for code in ("shop:one", "shop:two")
    ]
    low, high = sorted(row.pk for row in rows)
    # While the marketplace is asked (after the claim, before the intent is written), another
    # transaction locks the second row; once the beat waits for it, it asks for the first.
    crossing = Crossing((Outbox, high), (Outbox, low))
    ichiba.arrived = _waits_for(crossing)
    run = _cycle_with(crossing, caplog)

    assert run.error == ""
    assert ["deadlock detected" in m for m in _retried(caplog)] == [True]
    assert set(Outbox.objects.values_list("status", "reason")) == {(Status.SENT, Reason.DELIVERED)}
    assert sorted(row_id for row_id, _ in recording_channel.delivered) == [low, high]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_recording_survives_a_deadlock(recording_channel, caplog):
    first, _ = _two_due_rows()
    # While the channel delivers, another transaction locks the first row's watch; once the
    # recording (which holds the rows it moved) waits for it, it asks for the first row.
    crossing = Crossing((Watch, first.watch_id), (Outbox, first.pk))
    recording_channel.during = _waits_for(crossing)
    run = _cycle_with(crossing, caplog)

    assert run.error == ""
    assert ["deadlock detected" in m for m in _retried(caplog)] == [True]
    assert set(Outbox.objects.values_list("status", "reason")) == {(Status.SENT, Reason.DELIVERED)}
    assert Watch.objects.get(pk=first.watch_id).last_notified_price is not None
    assert len(recording_channel.delivered) == 2
