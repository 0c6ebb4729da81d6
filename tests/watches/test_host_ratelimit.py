"""One host's marketplace budget without Redis (`watches.marketplaces.hostlimit`), on a fake
clock: every process of the host takes its slots from one file, on the wall clock's grid, and
a hold-off holds them all. Nothing here measures real time."""

from __future__ import annotations

import itertools
import multiprocessing

import pytest

from tests.fakes.clock import FakeClock
from tests.fleet_limiter_worker import take_host_slots
from tests.limiter_checks import arrivals_per_second
from watches.marketplaces import hostlimit, ratelimit
from watches.marketplaces.hostlimit import HostRateLimiter, budget_path
from watches.marketplaces.ratelimit import limiter_for


def _limiter(tmp_path, clock, rate=1.0, sleep=None) -> HostRateLimiter:
    return HostRateLimiter(tmp_path / "budget", rate, clock=clock, sleep=sleep or clock.sleep)


def test_two_processes_of_the_host_share_one_budget(tmp_path):
    context = multiprocessing.get_context("spawn")
    start = context.Manager().Barrier(2)
    path = str(tmp_path / "rakuten-shared")
    with context.Pool(2) as pool:
        runs = [
            pool.apply_async(take_host_slots, (path, 2.0, 1_000_000.0, 10, start)) for _ in range(2)
        ]
        waits = [wait for run in runs for wait in run.get(timeout=60)]
    # 20 requests at 2/s from two processes: 20 distinct slots half a second apart, as one
    # process alone would have been given (on the grid: the first a quarter second on).
    assert sorted(waits) == pytest.approx([0.25 + i * 0.5 for i in range(20)])


def test_slots_fall_mid_second_on_the_wall_clock(tmp_path):
    clock = FakeClock()
    clock.now = 100.3
    limiter = _limiter(tmp_path, clock)
    assert limiter.wait_needed() == pytest.approx(0.2)
    assert limiter.acquire() == pytest.approx(0.2)  # at 100.5
    assert limiter.acquire() == pytest.approx(1.0)  # at 101.5: never a burst
    assert clock.now == pytest.approx(101.5)


def test_requests_late_on_their_way_never_arrive_two_in_one_second(tmp_path):
    """The marketplace counts arrivals per second: no second ever sees two
    (`tests.limiter_checks`)."""
    per_second = arrivals_per_second(lambda clock, sleep: _limiter(tmp_path, clock, sleep=sleep))
    assert sum(per_second.values()) > 250
    assert max(per_second.values()) == 1


def test_a_caller_that_wakes_too_late_gives_its_slot_up_and_takes_the_next(tmp_path):
    clock = FakeClock()
    clock.now = 1000.0
    late_once = iter([0.4])

    def sleep(seconds: float) -> None:
        clock.sleep(seconds + next(late_once, 0.0))

    limiter = _limiter(tmp_path, clock, sleep=sleep)
    # The slot at .5 s woke at .9 s: too late (more than a quarter second); the next is 1.5 s.
    assert limiter.acquire() == pytest.approx(0.5 + 0.6)
    assert clock.now == pytest.approx(1001.5)


def test_a_caller_too_slow_for_every_slot_asks_nothing(tmp_path):
    clock = FakeClock()
    limiter = _limiter(tmp_path, clock, sleep=lambda seconds: clock.sleep(seconds + 0.5))
    assert limiter.acquire() is None


def test_slots_taken_are_counted_per_minute_for_the_last_two_minutes(tmp_path):
    clock = FakeClock()
    clock.now = 60 * 1000.0
    limiter, other = _limiter(tmp_path, clock, rate=100.0), _limiter(tmp_path, clock, rate=100.0)
    for _ in range(4):
        limiter.acquire()
        other.acquire()
    assert (limiter.used(1000), other.used(1000), limiter.used(1001)) == (8, 8, 0)
    clock.now = 60 * 1001.5
    limiter.acquire()
    assert (limiter.used(1000), limiter.used(1001)) == (8, 1)
    clock.now = 60 * 1002.5
    limiter.acquire()
    assert (limiter.used(1000), limiter.used(1001), limiter.used(1002)) == (0, 1, 1)


def test_an_unreadable_budget_file_is_an_idle_budget(tmp_path):
    (tmp_path / "budget").write_text("not what a budget writes")
    clock = FakeClock()
    clock.now = 100.5
    limiter = _limiter(tmp_path, clock)
    assert limiter.acquire() == 0.0
    assert limiter.used(1) == 1


def test_a_hold_off_holds_every_process_of_the_host(tmp_path):
    clock = FakeClock()
    clock.now = 100.5
    told, other = _limiter(tmp_path, clock), _limiter(tmp_path, clock)
    told.hold_off(30)  # a 429 with Retry-After: 30
    assert other.wait_needed() == pytest.approx(30)
    assert other.acquire(max_wait=10) is None
    assert other.acquire() == pytest.approx(30)


def test_a_caller_that_will_not_wait_takes_no_slot(tmp_path):
    clock = FakeClock()
    clock.now = 100.5
    limiter = _limiter(tmp_path, clock)
    limiter.hold_off(30)
    assert limiter.acquire(max_wait=10) is None
    assert clock.sleeps == []
    assert limiter.acquire() == pytest.approx(30), "refusing took no slot"


def test_without_redis_the_adapters_take_the_hosts_budget(settings, tmp_path):
    settings.REDIS_URL = ""
    settings.VAR_DIR = tmp_path
    try:
        limiter = limiter_for("yahoo", "other-id", 1.0)
        assert isinstance(limiter, HostRateLimiter)
        assert limiter.path == budget_path(tmp_path, "yahoo:other-id")
        assert limiter.path.parent == tmp_path / "ratelimit"
        assert "other-id" not in limiter.path.name, "an id is a credential"
    finally:
        ratelimit.forget_limiter("yahoo:other-id", 1.0)


def test_forgetting_a_budget_forgets_its_hold_off(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.REDIS_URL = ""
    limiter_for("rakuten", "some-id", 1.0).hold_off(120)
    ratelimit.forget_limiter("rakuten:some-id", 1.0)
    try:
        assert limiter_for("rakuten", "some-id", 1.0).wait_needed() <= 1.0
    finally:
        ratelimit.forget_limiter("rakuten:some-id", 1.0)


def test_processes_either_side_of_a_clock_step_keep_their_slots_apart(tmp_path):
    # One host clock; the second process started after the system clock stepped 0.9 s on.
    clock = FakeClock()
    clock.now = 100.0
    before = HostRateLimiter(tmp_path / "budget", 1.0, clock=clock, sleep=clock.sleep)
    after = HostRateLimiter(
        tmp_path / "budget", 1.0, clock=clock, wall_offset=0.9, sleep=clock.sleep
    )
    taken = []
    for limiter in (before, after) * 4:
        limiter.acquire()
        taken.append(clock.now)
    gaps = [later - earlier for earlier, later in itertools.pairwise(taken)]
    assert min(gaps) >= 1.0 - 1e-6, gaps


def test_a_budget_written_in_another_boot_of_the_host_is_idle(tmp_path):
    (tmp_path / "budget").write_text('{"boot": "another boot", "next": 5000.0, "used": {}}')
    clock = FakeClock()
    clock.now = 100.5
    assert _limiter(tmp_path, clock).acquire() == 0.0


def test_a_write_that_fails_leaves_the_last_state_whole(tmp_path, monkeypatch):
    clock = FakeClock()
    clock.now = 100.5
    limiter = _limiter(tmp_path, clock)
    limiter.hold_off(30)
    kept = (tmp_path / "budget").read_text()

    def killed(*args):
        raise OSError("the process died while writing")

    monkeypatch.setattr(hostlimit.os, "replace", killed)
    with pytest.raises(OSError):
        limiter.hold_off(60)
    monkeypatch.undo()
    assert (tmp_path / "budget").read_text() == kept
    assert sorted(path.name for path in tmp_path.iterdir()) == ["budget", "budget.lock"]
    assert limiter.wait_needed() == pytest.approx(30)
