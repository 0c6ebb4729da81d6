"""The poll plan: with a budget of N requests a run asks about the N listings the priority
names (counted at the fake Ichiba), unwatched listings get only what is left, a share is kept
for the dispatcher, and a fresh poll observation serves as the dispatcher's re-fetch."""

from __future__ import annotations

import datetime as dt
import types
import zoneinfo

import pytest

from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.clock import FakeClock
from tests.fakes.ichiba import APP_ID
from watches import services
from watches.marketplaces.base import FetchError, Observation
from watches.marketplaces.ratelimit import RateLimiter, forget_limiter, install_limiter
from watches.models import Listing, Trigger, Watch
from watches.polling import poll as poll_module
from watches.polling.plan import plan, run_budget, watched_coverage
from watches.polling.poll import due_listings, poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
HOUR_AGO = T0 - dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def one_item_a_request(settings):
    """These listings share a shop: the plan of one request an item is what is tested here
    (requests of other shapes: tests/watches/test_poll_shapes.py)."""
    settings.POLL_SHAPES = ["item"]


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


@pytest.fixture
def rakuten(ichiba, settings):
    """The fake Ichiba at 1 request/s on a fake clock: the limiter's waits cost no time."""
    fake = FakeClock()
    install_limiter(
        f"rakuten:{APP_ID}",
        settings.RAKUTEN_RATE_PER_SECOND,
        RateLimiter(1.0, clock=fake, sleep=fake.sleep),
    )
    yield ichiba
    forget_limiter(f"rakuten:{APP_ID}", settings.RAKUTEN_RATE_PER_SECOND)


def budget_of(settings, requests: int) -> None:
    """A run's budget of `requests` at 1 request/s: 4 × that many seconds, three quarters of
    them kept for the dispatcher."""
    settings.POLL_MAX_SECONDS = 4 * requests
    settings.POLL_REFETCH_SHARE = 0.75


def listing(ichiba, code: str, *, price: int = 1000, in_stock: bool = True, **fields) -> Listing:
    ichiba.add(f"shop:{code}", price=price, available=in_stock)
    fields.setdefault("last_polled_at", HOUR_AGO)
    return ListingFactory.create(
        source="rakuten",
        item_code=f"shop:{code}",
        price=price,
        shipping=0,
        in_stock=in_stock,
        units_per_pack=None,
        **fields,
    )


def watch(target: Listing, count: int = 1, **fields) -> None:
    fields.setdefault("trigger", Trigger.TARGET_PRICE)
    for _ in range(count):
        WatchFactory(listing=target, device=DeviceFactory(), **fields)


def asked(ichiba) -> list[str]:
    return [query["itemCode"].removeprefix("shop:") for query in ichiba.requests]


def test_a_budget_of_n_asks_about_the_n_listings_the_priority_names(clock, rakuten, settings):
    budget_of(settings, 3)
    popular_far = listing(rakuten, "popular-far", price=1000)
    watch(popular_far, 30, target_price=500)  # 100 % away, 30 watchers
    close = listing(rakuten, "close", price=1000)
    watch(close, target_price=990)  # 1 % away
    # 5 % away, and the watched listing checked longest ago: the quarter's pick, in the runs
    # that have one (three of four at a budget of 3), is one the priority names too.
    medium = listing(rakuten, "medium", price=1000, last_polled_at=HOUR_AGO - dt.timedelta(hours=1))
    watch(medium, target_price=950)
    sold_out = listing(rakuten, "sold-out", in_stock=False)
    watch(sold_out, trigger=Trigger.BACK_IN_STOCK, target_price=None)
    for n in range(3):
        listing(rakuten, f"nobody-{n}", last_polled_at=None)

    result = poll()

    assert asked(rakuten) == ["sold-out", "close", "medium"]
    assert result.listings == 3


def test_close_to_target_goes_before_many_watches_far_away(clock, rakuten):
    popular_far = listing(rakuten, "popular-far")
    watch(popular_far, 50, target_price=400)
    close = listing(rakuten, "close")
    watch(close, target_price=980)
    chosen = plan(due_listings(T0), T0, budgets={"rakuten": 1})
    assert [item.listing_id for item in chosen] == [close.pk]


def test_unwatched_listings_get_only_the_leftovers(clock, rakuten, settings):
    budget_of(settings, 4)
    # Unwatched and never polled: the oldest by far, yet after every watched one.
    for n in range(3):
        listing(rakuten, f"nobody-{n}", last_polled_at=None)
    for n in range(2):
        watch(listing(rakuten, f"watched-{n}"), target_price=500)

    poll()

    assert sorted(asked(rakuten)[:2]) == ["watched-0", "watched-1"]
    # Two requests left: the two least recently polled unwatched listings (ids break ties).
    assert asked(rakuten)[2:] == ["nobody-0", "nobody-1"]


def test_without_leftovers_no_unwatched_listing_is_asked(clock, rakuten, settings):
    budget_of(settings, 2)
    listing(rakuten, "nobody", last_polled_at=None)
    for n in range(3):
        watch(listing(rakuten, f"watched-{n}"), target_price=500)
    poll()
    assert len(rakuten.requests) == 2
    assert "nobody" not in asked(rakuten)


def test_longer_unchecked_and_more_watched_and_more_volatile_come_first(clock, rakuten):
    recent = listing(rakuten, "recent", last_polled_at=T0 - dt.timedelta(minutes=10))
    old = listing(rakuten, "old", last_polled_at=T0 - dt.timedelta(minutes=50))
    few = listing(rakuten, "few")
    many = listing(rakuten, "many")
    calm = listing(rakuten, "calm", typical_price=1000, low_90=990)
    jumpy = listing(rakuten, "jumpy", typical_price=1000, low_90=800)
    for target in (recent, old, few, calm, jumpy):
        watch(target, target_price=500)
    watch(many, 20, target_price=500)

    order = [item.listing_id for item in plan(due_listings(T0), T0, budgets={"rakuten": None})]

    assert order.index(old.pk) < order.index(recent.pk)
    assert order.index(many.pk) < order.index(few.pk)
    assert order.index(jumpy.pk) < order.index(calm.pk)


def test_a_quarter_of_the_budget_goes_to_the_watched_listing_checked_longest_ago(
    clock, rakuten, settings
):
    far = listing(rakuten, "far", last_polled_at=T0 - dt.timedelta(hours=3))
    watch(far, target_price=300)  # 70 % away: its score is the lowest by far
    for n in range(4):
        close = listing(rakuten, f"close-{n}", last_polled_at=T0 - dt.timedelta(minutes=20))
        watch(close, target_price=990)
    chosen = plan(due_listings(T0), T0, budgets={"rakuten": 4})
    assert far.pk in [item.listing_id for item in chosen]
    assert len(chosen) == 4
    assert chosen[-1].listing_id == far.pk, "asked last: worth least"
    # Three requests: three quarters of one a run, carried from run to run by the clock —
    # the quarter asks in three runs of any four in a row, the score decides the fourth.
    runs = [T0 + dt.timedelta(minutes=settings.POLL_EVERY_MINUTES * n) for n in range(4)]
    plans = [plan(due_listings(at), at, budgets={"rakuten": 3}) for at in runs]
    assert [len(chosen) for chosen in plans] == [3, 3, 3, 3]
    assert sum(far.pk in [item.listing_id for item in chosen] for chosen in plans) == 3


def test_a_listing_far_from_every_line_is_not_starved(clock, rakuten, settings):
    """Near listings enough to fill every run's budget; the far ones still come round."""
    budget_of(settings, 4)
    for n in range(8):
        watch(listing(rakuten, f"close-{n}"), target_price=990)
    for n in range(2):
        watch(listing(rakuten, f"far-{n}"), target_price=300)
    for run in range(4):
        clock.move_to(T0 + dt.timedelta(minutes=15 * run), tick=False)
        poll()
    assert len(rakuten.requests) == 16
    assert {"far-0", "far-1"} <= set(asked(rakuten))


def test_paused_and_removed_watches_do_not_make_a_listing_watched(clock, rakuten):
    paused = listing(rakuten, "paused")
    watch(paused, paused=True)
    removed = listing(rakuten, "removed")
    watch(removed, removed_at=T0)
    chosen = plan(due_listings(T0), T0, budgets={"rakuten": None})
    assert {item.listing_id: item.watched for item in chosen} == {
        paused.pk: False,
        removed.pk: False,
    }


def test_a_listing_far_from_every_line_is_not_starved_by_a_budget_of_three(
    time_machine, rakuten, settings
):
    """A quarter of 3 requests is less than one: carried from run to run, it still asks the
    listing far from every line (rounded down every run, it never would)."""
    budget_of(settings, 3)
    far = listing(rakuten, "far", last_polled_at=T0 - dt.timedelta(hours=3))
    watch(far, target_price=300)  # 70 % away
    start = T0 - dt.timedelta(minutes=20)
    for n in range(12):
        watch(listing(rakuten, f"close-{n}", last_polled_at=start), target_price=990)  # 1 %
    for run in range(15):  # half an hour of runs, one every POLL_EVERY_MINUTES
        at = T0 + dt.timedelta(minutes=settings.POLL_EVERY_MINUTES * run)
        time_machine.move_to(at, tick=False)
        poll(max_seconds=settings.POLL_MAX_SECONDS)
    assert len(rakuten.requests) == 45
    assert "far" in asked(rakuten), "checked 3 hours ago, and never asked in 15 runs"


def test_the_lowest_rate_the_settings_accept_still_polls(time_machine, ichiba, settings):
    """0.01 request/s is 0.96 of a request a run (2 minutes, a fifth kept for the dispatcher):
    carried from run to run, one request in 24 runs of 25, where rounding down asked nothing,
    ever."""
    settings.RAKUTEN_RATE_PER_SECOND = 0.01
    fake = FakeClock()
    install_limiter(f"rakuten:{APP_ID}", 0.01, RateLimiter(0.01, clock=fake, sleep=fake.sleep))
    try:
        watch(listing(ichiba, "watched", last_polled_at=T0 - dt.timedelta(hours=3)))
        budgets = []
        for run in range(25):
            at = T0 + dt.timedelta(minutes=settings.POLL_EVERY_MINUTES * run)
            budgets.append(run_budget("rakuten", at))
            if run < 10:  # 20 minutes: 12 requests allowed, 9.6 of them polling's
                time_machine.move_to(at, tick=False)
                poll(max_seconds=settings.POLL_MAX_SECONDS)
        assert asked(ichiba) != [], "the listing was never polled in 20 minutes"
        assert sorted(budgets) == [0] + [1] * 24
    finally:
        forget_limiter(f"rakuten:{APP_ID}", 0.01)


def test_a_share_of_the_budget_is_left_for_the_dispatcher(rakuten, settings):
    settings.POLL_MAX_SECONDS = 100
    settings.POLL_REFETCH_SHARE = 0.2
    assert run_budget("rakuten") == 80  # 1 request/s for 100 s, a fifth kept
    assert run_budget("demo") is None  # no budget: every due listing


def test_a_run_plans_no_more_than_the_time_until_the_next_run_allows(rakuten, settings):
    settings.POLL_MAX_SECONDS = 120
    settings.POLL_REFETCH_SHARE = 0.2
    settings.POLL_EVERY_MINUTES = 1
    # Runs start every 60 s: a run planning 120 s of requests would still be asking when the
    # next one starts and plans the same listings.
    assert run_budget("rakuten") == 48
    settings.POLL_EVERY_MINUTES = 15
    assert run_budget("rakuten") == 96  # the run's own time is the bound


def test_several_application_ids_give_a_run_more(rakuten, settings):
    settings.POLL_MAX_SECONDS = 100
    settings.POLL_REFETCH_SHARE = 0.2
    settings.RAKUTEN_APP_IDS = [APP_ID, "second-id"]
    settings.RAKUTEN_ACCESS_KEYS = rakuten.accept(*settings.RAKUTEN_APP_IDS)
    try:
        # The second id has its own process-local limiter at the configured rate.
        assert run_budget("rakuten") == int(80 + settings.RAKUTEN_RATE_PER_SECOND * 80)
    finally:
        forget_limiter("rakuten:second-id", settings.RAKUTEN_RATE_PER_SECOND)


def test_a_fresh_poll_observation_serves_as_the_dispatchers_refetch(clock, rakuten, settings):
    target = listing(rakuten, "fresh", price=1000)
    rakuten.add("shop:fresh", price=880)
    poll(codes=["shop:fresh"])
    assert len(rakuten.requests) == 1

    clock.move_to(T0 + dt.timedelta(minutes=3), tick=False)
    stale_copy = Listing.objects.get(pk=target.pk)
    stale_copy.price = 1000  # as the dispatcher may hold it, read before the poll
    answers = services.refetch(
        [stale_copy], T0 + dt.timedelta(minutes=3), fresh_within=dt.timedelta(minutes=5)
    )

    assert len(rakuten.requests) == 1  # one request at the marketplace, not two
    answer = answers[target.pk]
    assert isinstance(answer, Observation)
    assert (answer.price, answer.in_stock, answer.observed_at) == (880, True, T0)
    assert stale_copy.price == 880


def test_a_listing_the_caller_just_loaded_serves_as_it_is_without_a_second_read(
    clock, rakuten, django_assert_num_queries
):
    """The dispatcher loads its listings with the batch: `as_loaded` takes their state as
    loaded — a fresh one is the answer with no query and no request; a stale one is asked."""
    fresh = listing(rakuten, "loaded-fresh", price=880, last_polled_at=T0 - dt.timedelta(minutes=2))
    stale = listing(rakuten, "loaded-stale", last_polled_at=T0 - dt.timedelta(minutes=10))
    with django_assert_num_queries(0):
        answers = services.refetch(
            [fresh], T0, fresh_within=dt.timedelta(minutes=5), as_loaded=True
        )
    assert rakuten.requests == []
    assert (answers[fresh.pk].price, answers[fresh.pk].observed_at) == (
        880,
        T0 - dt.timedelta(minutes=2),
    )

    rakuten.add("shop:loaded-stale", price=700)
    answers = services.refetch([stale], T0, fresh_within=dt.timedelta(minutes=5), as_loaded=True)
    assert len(rakuten.requests) == 1
    assert answers[stale.pk].price == 700


def test_refetch_or_reuse_says_which_answers_were_stored_observations(clock, rakuten):
    """What the dispatcher tells apart when a value grows too old before its delivery: a
    reused observation (asked again at once) or an answer asked for now (its backoff)."""
    fresh = listing(rakuten, "told-fresh", price=880, last_polled_at=T0 - dt.timedelta(minutes=2))
    stale = listing(rakuten, "told-stale", last_polled_at=T0 - dt.timedelta(minutes=10))
    rakuten.add("shop:told-stale", price=700)

    answers, reused = services.refetch_or_reuse(
        [fresh, stale], T0, fresh_within=dt.timedelta(minutes=5), as_loaded=True
    )

    assert (answers[fresh.pk].price, answers[stale.pk].price) == (880, 700)
    assert reused == {fresh.pk}
    assert len(rakuten.requests) == 1
    assert services.refetch_or_reuse([stale], T0)[1] == set(), "no bound given: nothing reused"


def test_an_older_observation_is_asked_again(clock, rakuten):
    target = listing(rakuten, "old", last_polled_at=T0 - dt.timedelta(minutes=10))
    answers = services.refetch([target], T0, fresh_within=dt.timedelta(minutes=5))
    assert len(rakuten.requests) == 1
    assert isinstance(answers[target.pk], Observation)


@pytest.mark.parametrize("as_loaded", [False, True], ids=["read again", "as the caller loaded it"])
def test_a_failed_poll_is_no_fresh_observation(clock, rakuten, as_loaded):
    target = listing(rakuten, "broken", last_polled_at=T0, last_error="server: HTTP 500")
    rakuten.behave["shop:broken"] = "server"
    answers = services.refetch(
        [target], T0, fresh_within=dt.timedelta(minutes=5), as_loaded=as_loaded
    )
    assert len(rakuten.requests) == 1
    assert isinstance(answers[target.pk], FetchError)


def test_coverage_counts_watched_listings_checked_within_15_minutes_and_an_hour(clock, rakuten):
    for minutes in (5, 14, 40, 90):
        watch(listing(rakuten, f"w{minutes}", last_polled_at=T0 - dt.timedelta(minutes=minutes)))
    listing(rakuten, "unwatched", last_polled_at=T0)
    paused = listing(rakuten, "paused-listing", paused=True, last_polled_at=T0)
    watch(paused)
    assert Watch.objects.count() == 5
    assert watched_coverage(T0) == {"watched": 4, "within_15m": 0.5, "within_1h": 0.75}


def test_a_run_cut_short_still_asks_the_listing_checked_longest_ago(
    time_machine, rakuten, settings, monkeypatch
):
    """Budget 4 a run (a quarter: 1 for the listing checked longest ago). The dispatcher's
    re-checks take the limiter's slots, so every run's time runs out after 3 of its 4
    requests. The quarter's pick, far from its line, comes last in the plan's order: cut
    there, it would come last again next run, and never be asked. The run asks it while its
    time lasts instead."""
    settings.POLL_SHAPES = ["item"]
    budget_of(settings, 4)
    settings.POLL_BATCH_SIZE = 1
    watch(listing(rakuten, "far"), target_price=300)
    for n in range(8):
        watch(listing(rakuten, f"close-{n}"), target_price=990)

    # Each request takes a "second"; a run may take 2.5 of them: 3 of its 4 requests.
    seconds = types.SimpleNamespace(monotonic=lambda: float(len(rakuten.requests)))
    monkeypatch.setattr(poll_module, "time", seconds)

    for run in range(6):
        time_machine.move_to(T0 + dt.timedelta(minutes=15 * run), tick=False)
        poll(max_seconds=2.5)

    asked = [query["itemCode"] for query in rakuten.requests]
    assert len(asked) >= 18  # at least the 3 a run its time allows
    assert "shop:far" in asked, "checked longest ago, and never asked in six runs"


def test_a_run_past_its_deadline_starts_no_more_than_one_batch(
    time_machine, rakuten, settings, monkeypatch
):
    """POLL_MAX_SECONDS plus one batch must stay below Q_TIMEOUT: the quarter for the
    listings known longest ago (10 requests here) is asked within the run's time, not after
    it."""
    settings.POLL_SHAPES = ["item"]
    budget_of(settings, 40)  # a quarter: 10 for the listings checked longest ago
    settings.POLL_BATCH_SIZE = 1
    day_ago = T0 - dt.timedelta(days=1)
    for n in range(10):
        watch(listing(rakuten, f"far-{n}", last_polled_at=day_ago), target_price=300)
    for n in range(40):
        watch(listing(rakuten, f"close-{n}"), target_price=990)
    seconds = types.SimpleNamespace(monotonic=lambda: float(len(rakuten.requests)))
    monkeypatch.setattr(poll_module, "time", seconds)
    time_machine.move_to(T0, tick=False)

    poll(max_seconds=2.5)

    asked = [query["itemCode"] for query in rakuten.requests]
    assert len(asked) == 3, "2.5 s: 2 batches in time, one more that ends past it"
    assert sum(code.startswith("shop:far-") for code in asked) == 2, asked
