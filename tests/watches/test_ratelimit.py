"""The client-side rate limiter, on a fake clock: no test here measures real time."""

from __future__ import annotations

import threading

import pytest

from tests.fakes.clock import FakeClock
from tests.fakes.ichiba import APP_ID
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.ratelimit import RateLimiter, install_limiter, shared_limiter


def test_requests_are_spaced_by_the_interval():
    clock = FakeClock()
    limiter = RateLimiter(2.0, clock=clock, sleep=clock.sleep)
    waits = [limiter.acquire() for _ in range(4)]
    assert waits == [0, 0.5, 0.5, 0.5]
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_no_wait_once_the_interval_has_passed():
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    limiter.acquire()
    clock.now += 1.0
    assert limiter.acquire() == 0
    assert clock.sleeps == []


def test_a_partly_elapsed_interval_waits_the_rest():
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    limiter.acquire()
    clock.now += 0.25
    assert limiter.acquire() == pytest.approx(0.75)


def test_hold_off_delays_the_next_slot():
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    limiter.hold_off(30)
    assert limiter.wait_needed() == 30
    assert limiter.acquire() == 30
    assert clock.sleeps == [30]


def test_a_caller_that_will_not_wait_that_long_gets_no_slot():
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    limiter.hold_off(30)
    assert limiter.acquire(max_wait=10) is None
    assert clock.sleeps == []
    # Refusing took no slot: the next caller still waits just the hold-off.
    assert limiter.acquire() == 30


def test_a_shorter_hold_off_never_shortens_the_queue():
    clock = FakeClock(sleeping_moves_time=False)
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        limiter.acquire()  # the next free slot is 5 s away
    limiter.hold_off(2)
    assert limiter.wait_needed() == 5


def test_concurrent_callers_each_get_their_own_slot():
    clock = FakeClock(sleeping_moves_time=False)  # all of them ask "at the same time"
    limiter = RateLimiter(4.0, clock=clock, sleep=clock.sleep)
    start = threading.Barrier(20)
    waits: list[float] = []
    lock = threading.Lock()

    def caller() -> None:
        start.wait()
        wait = limiter.acquire()
        with lock:
            waits.append(wait)

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(waits) == [i * 0.25 for i in range(20)]


def test_one_limiter_per_application_id_in_the_process():
    assert shared_limiter("rakuten:a", 1.0) is shared_limiter("rakuten:a", 1.0)
    assert shared_limiter("rakuten:a", 1.0) is not shared_limiter("rakuten:b", 1.0)


def test_polling_and_the_dispatcher_share_the_limiter(ichiba):
    # Each caller builds its own adapter (get_marketplace), yet they queue on one limiter.
    assert (
        RakutenMarketplace().budget.limiters[APP_ID] is RakutenMarketplace().budget.limiters[APP_ID]
    )


def test_the_adapter_waits_for_its_slot_before_every_request(ichiba, settings):
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    install_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND, limiter)
    codes = ["shop:a", "shop:b", "shop:c"]
    for code in codes:
        ichiba.add(code)
    RakutenMarketplace().fetch(codes)
    assert clock.sleeps == [1.0, 1.0]
    assert [query["itemCode"] for query in ichiba.requests] == codes


def test_a_429_holds_off_every_caller_of_the_application_id(ichiba, settings):
    clock = FakeClock()
    limiter = RateLimiter(1.0, clock=clock, sleep=clock.sleep)
    install_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND, limiter)
    ichiba.behave["shop:a"] = "rate_limited"
    ichiba.retry_after = "90"
    RakutenMarketplace().fetch(["shop:a"])
    assert limiter.wait_needed() == 90
