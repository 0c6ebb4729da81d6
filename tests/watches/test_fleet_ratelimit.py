"""The fleet's marketplace budget in a real Redis, on a fake clock: processes share it, a 429
lowers it for everyone and it recovers (AIMD), several application ids add up. Each test uses
its own key prefix; nothing here measures real time."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import uuid

import pytest
import redis

from tests.fakes.clock import FakeClock
from tests.fakes.ichiba import APP_ID
from tests.fleet_limiter_worker import take_slots
from tests.limiter_checks import arrivals_per_second
from watches.marketplaces import hostlimit, ratelimit
from watches.marketplaces.base import FetchKind
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.ratelimit import (
    Budget,
    RateLimiter,
    RedisRateLimiter,
    install_limiter,
    limiter_for,
)

REDIS = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def client():
    connection = redis.Redis.from_url(REDIS, socket_connect_timeout=1)
    try:
        connection.ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {REDIS}: {exc}")
    prefix = f"test-scale:{uuid.uuid4().hex}"
    connection.prefix = prefix
    yield connection
    for key in connection.scan_iter(f"{prefix}:*"):
        connection.delete(key)


def _limiter(client, clock, rate=2.0, key="rakuten:a", sleep=None) -> RedisRateLimiter:
    return RedisRateLimiter(
        client, f"{client.prefix}:{key}", rate, clock=clock, sleep=sleep or clock.sleep
    )


def test_two_processes_share_one_budget(client):
    context = multiprocessing.get_context("spawn")
    start = context.Manager().Barrier(2)
    key = f"{client.prefix}:rakuten:shared"
    with context.Pool(2) as pool:
        runs = [
            pool.apply_async(take_slots, (REDIS, key, 2.0, 1_000_000.0, 10, start))
            for _ in range(2)
        ]
        waits = [wait for run in runs for wait in run.get(timeout=60)]
    # 20 requests at 2/s from two processes: 20 distinct slots half a second apart, as one
    # process alone would have been given (on the grid: the first a quarter second on).
    assert sorted(waits) == pytest.approx([0.25 + i * 0.5 for i in range(20)])


def test_two_processes_asking_together_never_get_the_same_slot_at_three_a_second(client):
    """The next free slot is kept as the grid's boundary half an interval before it: a moment
    near the slot just given, rounded to the microsecond, was read back as that slot (at 3/s,
    asked 0.67 µs after a grid point, a moment the Redis server's clock gives)."""
    context = multiprocessing.get_context("spawn")
    start = context.Manager().Barrier(2)
    key = f"{client.prefix}:rakuten:grid"
    now = 1_700_000_000.833334  # the Redis server's TIME: whole microseconds
    with context.Pool(2) as pool:
        runs = [pool.apply_async(take_slots, (REDIS, key, 3.0, now, 1, start)) for _ in range(2)]
        waits = sorted(wait for run in runs for wait in run.get(timeout=60))
    # Two slots a third of a second apart, as any two requests of the id at 3/s must be.
    assert waits[1] - waits[0] == pytest.approx(1 / 3, abs=1e-5), waits


def test_slots_fall_mid_second_on_the_fleets_clock(client):
    clock = FakeClock()
    clock.now = 100.3
    limiter = _limiter(client, clock, rate=1.0)
    assert limiter.wait_needed() == pytest.approx(0.2)
    assert limiter.acquire() == pytest.approx(0.2)  # at 100.5
    assert limiter.acquire() == pytest.approx(1.0)  # at 101.5: never a burst
    assert clock.now == pytest.approx(101.5)


def test_an_idle_budget_asked_just_after_a_slot_gives_the_slot_it_takes(client):
    clock = FakeClock()
    clock.now = (
        60_000.5000008  # 0.8 µs after the slot at 60,000.5 (1/s): within the grid's tolerance
    )
    limiter = _limiter(client, clock, rate=1.0)
    assert limiter.acquire() == 0.0  # that slot, now: not a refusal (None)
    assert limiter.used(1000) == 1
    assert limiter.acquire() == pytest.approx(1.0, abs=1e-5)  # the next slot, a second on


def test_requests_late_on_their_way_never_arrive_two_in_one_second(client):
    """The marketplace counts arrivals per second: no second ever sees two
    (`tests.limiter_checks`)."""
    per_second = arrivals_per_second(
        lambda clock, sleep: _limiter(client, clock, rate=1.0, sleep=sleep)
    )
    assert sum(per_second.values()) > 250
    assert max(per_second.values()) == 1


def test_a_caller_that_wakes_too_late_gives_its_slot_up_and_takes_the_next(client):
    clock = FakeClock()
    clock.now = 60 * 1000.0
    late_once = iter([0.4])

    def sleep(seconds: float) -> None:
        clock.sleep(seconds + next(late_once, 0.0))

    limiter = _limiter(client, clock, rate=1.0, sleep=sleep)
    # The slot at .5 s woke at .9 s: too late (more than a quarter second); the next is 1.5 s.
    assert limiter.acquire() == pytest.approx(0.5 + 0.6)
    assert clock.now == pytest.approx(60 * 1000.0 + 1.5)
    assert limiter.used(1000) == 2  # the missed slot stays taken: nobody else sends in it


def test_a_caller_too_slow_for_every_slot_asks_nothing(client):
    clock = FakeClock()
    limiter = _limiter(client, clock, rate=1.0, sleep=lambda seconds: clock.sleep(seconds + 0.5))
    assert limiter.acquire() is None
    assert limiter.used(int(clock.now // 60)) == hostlimit.LATE_TRIES


def test_a_429_holds_off_every_process_of_the_fleet(client):
    clock = FakeClock()
    here, elsewhere = _limiter(client, clock), _limiter(client, clock)
    here.hold_off(30)
    # The first slot after the hold: the next grid point (a quarter second on at 2/s).
    assert elsewhere.wait_needed() == pytest.approx(30.25)
    assert elsewhere.acquire(max_wait=10) is None  # refused, no slot taken
    assert elsewhere.acquire() == pytest.approx(30.25)


def test_a_429_halves_the_fleets_rate_then_it_climbs_back(client):
    clock = FakeClock()
    here, elsewhere = _limiter(client, clock), _limiter(client, clock)
    assert elsewhere.current_rate() == 2.0
    here.hold_off(0)
    assert elsewhere.current_rate() == pytest.approx(1.0)
    # Lowered for everyone: slots one second apart, not half a second.
    assert elsewhere.acquire() == pytest.approx(0.25)
    assert elsewhere.acquire() == pytest.approx(1.0)
    clock.now = 100.0 + 75  # 75 s after the 429: a tenth of the rate back every 30 s
    assert here.current_rate() == pytest.approx(1.5)
    clock.now += 75
    assert here.current_rate() == pytest.approx(2.0)
    clock.now += 600
    assert here.current_rate() == pytest.approx(2.0)  # never above the configured rate
    assert here.acquire() == pytest.approx(0.25)
    assert here.acquire() == pytest.approx(0.5)


def test_below_the_configured_rate_slots_keep_the_lowered_rate_on_average(client):
    """At 0.7/s on the grid of 1/s the slots are one or two seconds apart, what the grid
    rounds up owed back to the next spacing: seven spacings take ten seconds."""
    clock = FakeClock(sleeping_moves_time=False)  # every request asked at one moment
    limiter = _limiter(client, clock, rate=1.0)
    limiter.hold_off(0)  # halved to 0.5/s ...
    clock.now += 60  # ... and climbed back by 0.2/s
    assert limiter.current_rate() == pytest.approx(0.7)
    waits = [limiter.acquire() for _ in range(8)]
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(waits)]
    assert set(gaps) == {1, 2} and sum(gaps) == 10, gaps


def test_a_budget_written_as_a_moment_to_the_microsecond_is_kept(client):
    """The earlier script wrote the next free moment rounded to the microsecond; a fleet's
    state left in that form still holds its hold-off and its rate."""
    clock = FakeClock()
    limiter = _limiter(client, clock, rate=2.0)
    client.hset(
        limiter.key, mapping={"tat": "130.000000", "rate": "1.000000", "rate_at": "100.000000"}
    )
    assert limiter.current_rate() == pytest.approx(1.0)
    assert limiter.acquire() == pytest.approx(30.25)  # the first grid point after the hold
    assert limiter.acquire() == pytest.approx(1.0)  # at the rate it had been lowered to


def test_the_429s_of_one_burst_lower_the_rate_once(client):
    clock = FakeClock()
    limiter = _limiter(client, clock)
    for _ in range(5):  # the requests in flight all answer 429 together
        limiter.hold_off(1)
    assert limiter.current_rate() == pytest.approx(1.0)
    clock.now += ratelimit.CUT_GAP_SECONDS
    limiter.hold_off(1)
    # A new burst after the gap: halved again (from what had climbed back meanwhile).
    climbed = 1.0 + 2.0 * ratelimit.INCREASE_PER_SECOND * ratelimit.CUT_GAP_SECONDS
    assert limiter.current_rate() == pytest.approx(climbed / 2, abs=1e-5)


def test_the_rate_never_falls_below_a_tenth(client):
    clock = FakeClock()
    limiter = _limiter(client, clock)
    for _ in range(10):
        limiter.hold_off(0)
        clock.now += ratelimit.CUT_GAP_SECONDS
    assert limiter.current_rate() >= 0.2
    assert limiter.current_rate() < 0.25


def test_several_application_ids_add_up(client):
    clock = FakeClock(sleeping_moves_time=False)  # everyone asks at the same moment
    budget = Budget(
        {
            "a": _limiter(client, clock, rate=1.0, key="rakuten:a"),
            "b": _limiter(client, clock, rate=1.0, key="rakuten:b"),
        }
    )
    slots = [budget.acquire() for _ in range(4)]
    assert [slot.waited for slot in slots] == pytest.approx([0.5, 0.5, 1.5, 1.5])
    assert sorted(slot.app_id for slot in slots) == ["a", "a", "b", "b"]
    assert budget.current_rate() == pytest.approx(2.0)
    # A 429 on one id slows that id only.
    budget.hold_off("a", 0)
    assert budget.current_rate() == pytest.approx(1.5)


def test_slots_taken_are_counted_per_minute(client):
    clock = FakeClock()
    clock.now = 60 * 1000.0
    limiter = _limiter(client, clock, rate=100.0)
    for _ in range(7):
        limiter.acquire()
    assert limiter.used(1000) == 7
    assert limiter.used(1001) == 0


def test_with_redis_every_process_uses_the_shared_budget(settings, client):
    settings.REDIS_URL = REDIS
    try:
        limiter = limiter_for("yahoo", "some-app-id", 1.0)
        assert isinstance(limiter, RedisRateLimiter)
        assert limiter.key == f"yasugoro:ratelimit:yahoo:{ratelimit.app_id_label('some-app-id')}"
        assert "some-app-id" not in limiter.key
        assert limiter_for("yahoo", "some-app-id", 1.0) is limiter
    finally:
        ratelimit.forget_limiter("yahoo:some-app-id", 1.0)


def test_yahoo_through_the_fleet_budget_never_meets_the_allowance_its_fake_enforces(
    client, yahoo, settings
):
    """The fake Yahoo answers 429 past one request of an appid in a wall-clock second, as the
    real one counts; the fleet's budget at 1/s never gets there."""
    from tests.fakes.yahoo import APP_ID as YAHOO_APP_ID
    from watches.marketplaces.base import Offers
    from watches.marketplaces.yahoo import YahooMarketplace

    yahoo.per_second = 1
    jans = [f"45000000000{n}0" for n in range(3)]
    for n, jan in enumerate(jans):
        yahoo.add(f"yasu-store_item-{n}", jan=jan)
    budget = RedisRateLimiter(client, f"{client.prefix}:yahoo:{YAHOO_APP_ID}", 1.0)
    install_limiter(f"yahoo:{YAHOO_APP_ID}", settings.YAHOO_RATE_PER_SECOND, budget)

    results = YahooMarketplace().offers(jans)

    assert all(isinstance(results[jan], Offers) for jan in jans), results
    assert (yahoo.too_many, yahoo.max_per_second()) == (0, {YAHOO_APP_ID: 1})


def test_an_unreachable_budget_makes_no_request(ichiba, settings):
    dead = redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.2)
    install_limiter(
        f"rakuten:{APP_ID}",
        settings.RAKUTEN_RATE_PER_SECOND,
        RedisRateLimiter(dead, "test-scale:dead", settings.RAKUTEN_RATE_PER_SECOND),
    )
    ichiba.add("shop:a")
    ichiba.add("shop:b")
    results = RakutenMarketplace().fetch(["shop:a", "shop:b"])
    assert {code: result.kind for code, result in results.items()} == {
        "shop:a": FetchKind.RATE_LIMITED,
        "shop:b": FetchKind.RATE_LIMITED,
    }
    assert ichiba.requests == []


@pytest.mark.django_db
def test_redis_lost_after_a_refused_slot_is_answered_as_ours_not_raised(ichiba, settings, client):
    """Redis fails over while a caller sleeps through its third missed slot: the refusal's
    "how long to wait" finds no Redis either. The batch is answered as ours, not raised: an
    escaped error made every code `bad_response`, spending the dispatcher's retries on our
    outage (decision 0045)."""
    from tests.fakes.relay import Relay
    from watches.polling.observations import fetch

    host = client.connection_pool.connection_kwargs
    relay = Relay((host.get("host", "127.0.0.1"), host.get("port", 6379)))
    relayed = redis.Redis(host="127.0.0.1", port=relay.port, socket_timeout=1)
    clock = FakeClock()
    sleeps = []

    def slow_process(seconds: float) -> None:
        """Wakes half a second late for every slot; Redis fails over during the third."""
        sleeps.append(seconds)
        clock.sleep(seconds + 0.5)
        if len(sleeps) == hostlimit.LATE_TRIES:
            relay.cut()

    rate = settings.RAKUTEN_RATE_PER_SECOND
    limiter = RedisRateLimiter(
        relayed, f"{client.prefix}:rakuten", 1.0, clock=clock, sleep=slow_process
    )
    install_limiter(f"rakuten:{APP_ID}", rate, limiter)
    ichiba.add("shop:a")
    ichiba.add("shop:b")
    try:
        results = fetch("rakuten", ["shop:a", "shop:b"])
    finally:
        ratelimit.forget_limiter(f"rakuten:{APP_ID}", rate)
        relay.cut()
    assert len(sleeps) == hostlimit.LATE_TRIES and ichiba.requests == []
    assert {code: (r.kind, r.ours) for code, r in results.items()} == {
        "shop:a": (FetchKind.RATE_LIMITED, True),
        "shop:b": (FetchKind.RATE_LIMITED, True),
    }, results


@pytest.mark.django_db
def test_a_row_waits_out_an_unreachable_budget_without_spending_its_retries(
    ichiba, settings, recording_channel
):
    """Redis down: nobody asks the shop, and the row is retried (`budget_unavailable`)
    without counting a retry, however long it lasts; once the budget answers again, the row
    is re-fetched and sent."""
    import datetime as dt

    import time_machine
    from django.utils import timezone

    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Reason, Status
    from tests.factories import ListingFactory, WatchFactory

    settings.OUTBOX_MAX_RETRY = 1
    rate = settings.RAKUTEN_RATE_PER_SECOND
    dead = redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.2)
    install_limiter(f"rakuten:{APP_ID}", rate, RedisRateLimiter(dead, "test-scale:dead", rate))
    ichiba.add("shop:a", price=900)
    listing = ListingFactory(source="rakuten", item_code="shop:a", price=900, units_per_pack=None)
    watch = WatchFactory(listing=listing, target_price=1000)
    start = timezone.now()
    enqueue_many([Detection.for_watch(watch, start, {"line": "1000", "price": 900})])
    row = Outbox.objects.get(watch=watch)
    try:
        for minutes in (1, 10, 20):  # three cycles: more than the cap of one retry allows
            with time_machine.travel(start + dt.timedelta(minutes=minutes), tick=False):
                run_cycle()
            row.refresh_from_db()
            assert (row.status, row.reason, row.retry_count) == (
                Status.RETRY,
                Reason.BUDGET_UNAVAILABLE,
                0,
            )
        assert ichiba.requests == []
        install_limiter(f"rakuten:{APP_ID}", rate, RateLimiter(rate))  # the budget is back
        with time_machine.travel(start + dt.timedelta(minutes=30), tick=False):
            run_cycle()
        row.refresh_from_db()
        assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED)
        assert ichiba.asked("shop:a") == 1
    finally:
        ratelimit.forget_limiter(f"rakuten:{APP_ID}", rate)


def test_the_adapter_spreads_requests_over_its_application_ids(ichiba, settings):
    settings.RAKUTEN_APP_IDS = ["id-one", "id-two"]
    settings.RAKUTEN_ACCESS_KEYS = ichiba.accept(*settings.RAKUTEN_APP_IDS)
    clock = FakeClock(sleeping_moves_time=False)
    for app_id in settings.RAKUTEN_APP_IDS:
        install_limiter(
            f"rakuten:{app_id}",
            settings.RAKUTEN_RATE_PER_SECOND,
            RateLimiter(1.0, clock=clock, sleep=clock.sleep),
        )
    try:
        codes = [f"shop:{n}" for n in range(4)]
        for code in codes:
            ichiba.add(code)
        ichiba.behave["shop:0"] = "rate_limited"
        ichiba.retry_after = "60"
        RakutenMarketplace().fetch(codes)
        used = [query["applicationId"] for query in ichiba.requests]
        # The first goes out under id-one and gets a 429: id-one is held off a minute, so the
        # rest go out under id-two, at its own pace.
        assert used == ["id-one", "id-two", "id-two", "id-two"]
    finally:
        for app_id in settings.RAKUTEN_APP_IDS:
            ratelimit.forget_limiter(f"rakuten:{app_id}", settings.RAKUTEN_RATE_PER_SECOND)


# --- Yahoo! Shopping takes its requests from the fleet's budget like Rakuten -----------------

YAHOO_JAN = "4901750404406"


def _yahoo_budget(client, settings, clock) -> RedisRateLimiter:
    from tests.fakes.yahoo import APP_ID as YAHOO_APP_ID

    rate = settings.YAHOO_RATE_PER_SECOND
    limiter = RedisRateLimiter(
        client, f"{client.prefix}:yahoo", rate, clock=clock, sleep=clock.sleep
    )
    install_limiter(f"yahoo:{YAHOO_APP_ID}", rate, limiter)
    return limiter


def test_with_redis_yahoos_adapter_takes_the_fleets_budget(yahoo, settings):
    from tests.fakes.yahoo import APP_ID as YAHOO_APP_ID
    from watches.marketplaces.yahoo import YahooMarketplace

    settings.REDIS_URL = REDIS
    rate = settings.YAHOO_RATE_PER_SECOND
    ratelimit.forget_limiter(f"yahoo:{YAHOO_APP_ID}", rate)
    try:
        adapter = YahooMarketplace()
        (limiter,) = adapter.budget.limiters.values()
        assert isinstance(limiter, RedisRateLimiter)
        assert limiter.key == f"yasugoro:ratelimit:yahoo:{ratelimit.app_id_label(YAHOO_APP_ID)}"
    finally:
        ratelimit.forget_limiter(f"yahoo:{YAHOO_APP_ID}", rate)


def test_a_yahoo_429_holds_off_every_process_of_the_fleet(yahoo, settings, client):
    from watches.marketplaces.yahoo import YahooMarketplace

    clock = FakeClock()
    _yahoo_budget(client, settings, clock)
    yahoo.add("store1_tp", jan=YAHOO_JAN)
    yahoo.behave[YAHOO_JAN] = "rate_limited"
    yahoo.retry_after = "120"

    (result,) = YahooMarketplace().offers([YAHOO_JAN]).values()

    assert result.kind == FetchKind.RATE_LIMITED and result.retry_after == 120
    # Another process reads the same budget in Redis: held off for the server's two minutes.
    other = RedisRateLimiter(
        client, f"{client.prefix}:yahoo", settings.YAHOO_RATE_PER_SECOND, clock=clock
    )
    assert other.wait_needed() == pytest.approx(120, abs=0.01)


def test_an_unreachable_budget_makes_no_yahoo_request(yahoo, settings):
    from tests.fakes.yahoo import APP_ID as YAHOO_APP_ID
    from watches.marketplaces.yahoo import YahooMarketplace

    dead = redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.2)
    rate = settings.YAHOO_RATE_PER_SECOND
    install_limiter(f"yahoo:{YAHOO_APP_ID}", rate, RedisRateLimiter(dead, "test-scale:dead", rate))
    yahoo.add("store1_tp", jan=YAHOO_JAN)

    results = YahooMarketplace().offers([YAHOO_JAN, "4902102072618"])

    assert {result.kind for result in results.values()} == {FetchKind.RATE_LIMITED}
    assert yahoo.requests == []
