"""A marketplace that answers a configuration fault is halted for the whole fleet, against
the fake Ichiba and the fake Yahoo on 127.0.0.1: every fault of the adapters halts its
marketplace, no request reaches the fake while it is halted (its request log), one probe
goes out per MARKETPLACE_PROBE_SECONDS even with two callers asking at once, and the probe
the marketplace answers lifts the halt — polling resumes by itself."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import zoneinfo

import pytest
from django.db import connection
from django.utils import timezone

from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.clock import FakeClock
from tests.fakes.ichiba import BASE_PATH, PAGE_MAX
from watches.marketplaces import halts
from watches.marketplaces.base import Ask, FetchError, FetchKind, Observation, Offers, Shape
from watches.marketplaces.rakuten import RakutenMarketplace
from watches.marketplaces.ratelimit import (
    RateLimiter,
    app_id_label,
    forget_limiter,
    install_limiter,
)
from watches.marketplaces.yahoo import YahooMarketplace
from watches.models import Listing, MarketplaceHalt, Product
from watches.polling.observations import fetch
from watches.polling.plan import plan
from watches.polling.poll import due_listings, poll
from watches.products.polling import fetch_offers, poll_products

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 12, 6, 10, 0, tzinfo=TOKYO)
PROBE = 300
A, B, C = "yasu-shop:tp-12r", "yasu-shop:dt-2k", "yasu-shop:sp-6"
STORE_ITEM = "yasu-store_tp-12r"
JAN = "4901234567894"


class KeyLostOnTheWay(RakutenMarketplace):
    """What reaches Rakuten when something between us strips the header: no access key."""

    def __init__(self) -> None:
        super().__init__()
        self.keys = dict.fromkeys(self.keys, "")


class AppIdLostOnTheWay(YahooMarketplace):
    """What reaches Yahoo when the application id is lost on the way: an empty appid."""

    def __init__(self) -> None:
        super().__init__()
        self.app_id = ""


@pytest.fixture
def clock(time_machine, settings):
    settings.MARKETPLACE_PROBE_SECONDS = PROBE
    time_machine.move_to(T0, tick=False)
    return time_machine


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def rakuten(ichiba):
    for code in (A, B, C):
        ichiba.add(code, price=1000)
    return ichiba


def retire_the_version(ichiba, settings) -> None:
    settings.RAKUTEN_API_VERSION = "20220601"  # retired on the new host on 2026-08-18


def missing_key(ichiba, settings) -> None:
    settings.MARKETPLACE_ADAPTERS = {
        **settings.MARKETPLACE_ADAPTERS,
        "rakuten": f"{__name__}.KeyLostOnTheWay",
    }


def wrong_key(ichiba, settings) -> None:
    settings.RAKUTEN_ACCESS_KEY = "pk_not-the-right-one"


def unknown_application(ichiba, settings) -> None:
    settings.RAKUTEN_APP_ID = "not-the-right-one"


def refused_401(ichiba, settings) -> None:
    for code in (A, B, C):
        ichiba.behave[code] = "unauthorized"


def referrer_missing(ichiba, settings) -> None:
    ichiba.sites = {"https://yasugoro.example"}


def referrer_not_allowed(ichiba, settings) -> None:
    ichiba.sites = {"https://yasugoro.example"}
    settings.RAKUTEN_SITE_URL = "https://elsewhere.example/"


def ip_not_allowed(ichiba, settings) -> None:
    ichiba.allowed_ips = {"203.0.113.7"}  # a backend registration, another server's address


# (the fault, what the halt names to fix: a setting, or the registration)
RAKUTEN_FAULTS = [
    pytest.param(retire_the_version, ["RAKUTEN_API_VERSION"], id="retired-version"),
    pytest.param(missing_key, ["RAKUTEN_ACCESS_KEY", "RAKUTEN_APP_IDS"], id="missing-key"),
    pytest.param(wrong_key, ["RAKUTEN_ACCESS_KEY", "RAKUTEN_APP_IDS"], id="wrong-key"),
    pytest.param(unknown_application, ["RAKUTEN_APP_ID", "RAKUTEN_APP_IDS"], id="unknown-id"),
    pytest.param(refused_401, ["RAKUTEN_ACCESS_KEY", "RAKUTEN_APP_IDS"], id="401"),
    pytest.param(referrer_missing, ["RAKUTEN_SITE_URL"], id="referrer-missing"),
    pytest.param(referrer_not_allowed, ["RAKUTEN_SITE_URL"], id="referrer-not-allowed"),
    pytest.param(ip_not_allowed, [], id="ip-not-allowed"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("fault", "to_fix"), RAKUTEN_FAULTS)
def test_every_configuration_fault_halts_rakuten_and_nothing_more_is_asked(
    clock, rakuten, settings, fault, to_fix
):
    fault(rakuten, settings)
    first = fetch("rakuten", [A, B])
    assert len(rakuten.requests) == 1  # the adapter stops its batch at the fault
    halt = MarketplaceHalt.objects.get(source="rakuten")
    assert (halt.since, halt.probe_after) == (T0, at(PROBE))
    assert halts.settings_named(halt.detail) == to_fix
    for code in (A, B):
        assert first[code] == FetchError(FetchKind.CONFIG, halt.detail, retry_after=PROBE)

    # Until the next probe, nobody's call reaches Rakuten: polling, product polling (none
    # here), a re-fetch, intake.
    clock.move_to(at(PROBE - 1), tick=False)
    again = fetch("rakuten", [C, A])
    assert again[C] == FetchError(FetchKind.CONFIG, halt.detail, retry_after=1)
    ListingFactory(source="rakuten", item_code=C, last_polled_at=None)
    assert poll().listings == 0
    assert len(rakuten.requests) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param("unknown-appid", id="unknown-appid-403-xml"),
        pytest.param("bad_appid", id="refused-appid-403-json"),
        pytest.param("lost-appid", id="no-appid-400"),
    ],
)
def test_yahoos_refused_application_id_halts_yahoo_and_nothing_more_is_asked(
    clock, yahoo, settings, refusal
):
    yahoo.add(STORE_ITEM, jan=JAN, price=500)
    yahoo.add("other-store_tp-12r", jan=JAN, price=520)
    if refusal == "unknown-appid":
        settings.YAHOO_APP_ID = "not-registered"
    elif refusal == "bad_appid":
        yahoo.behave[JAN] = yahoo.behave[STORE_ITEM] = "bad_appid"
    else:
        settings.MARKETPLACE_ADAPTERS = {
            **settings.MARKETPLACE_ADAPTERS,
            "yahoo": f"{__name__}.AppIdLostOnTheWay",
        }
    answers = fetch_offers("yahoo", [JAN, "4900000000008"])
    assert len(yahoo.requests) == 1
    halt = MarketplaceHalt.objects.get(source="yahoo")
    assert halts.settings_named(halt.detail) == ["YAHOO_APP_ID"]
    assert {answer.kind for answer in answers.values()} == {FetchKind.CONFIG}

    # Product polling and item fetches ask nothing until the probe.
    Product.objects.create(jan=JAN, name="テスト商品")
    poll_products(force=True)
    assert fetch("yahoo", [STORE_ITEM])[STORE_ITEM].kind == FetchKind.CONFIG
    assert len(yahoo.requests) == 1
    assert Product.objects.get(jan=JAN).last_error.startswith("yahoo config: ")


@pytest.mark.django_db
def test_yahoos_day_used_up_halts_it_until_a_probe_after_midnight_is_answered(
    clock, yahoo, settings
):
    yahoo.add(STORE_ITEM, jan=JAN, price=500)
    yahoo.per_day = 3  # 50,000 in truth
    for _ in range(3):
        assert isinstance(fetch_offers("yahoo", [JAN])[JAN], Offers)
    refused = fetch_offers("yahoo", [JAN])[JAN]
    assert refused.kind == FetchKind.CONFIG and "50,000 requests a day" in refused.detail
    assert MarketplaceHalt.objects.get().source == "yahoo"
    clock.move_to(at(PROBE), tick=False)  # the probe, the same day: refused again
    assert fetch_offers("yahoo", [JAN])[JAN].kind == FetchKind.CONFIG
    assert MarketplaceHalt.objects.exists()

    # Past midnight in Japan: the next probe is answered and the halt lifts by itself.
    midnight = dt.datetime.combine(
        T0.astimezone(TOKYO).date() + dt.timedelta(days=1), dt.time(), tzinfo=TOKYO
    )
    clock.move_to(midnight + dt.timedelta(minutes=1), tick=False)
    assert isinstance(fetch_offers("yahoo", [JAN])[JAN], Offers)
    assert not MarketplaceHalt.objects.exists()


@pytest.mark.django_db
def test_one_probe_per_interval_while_the_fault_lasts(clock, rakuten, settings):
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A, B, C])
    for interval in (1, 2, 3):
        clock.move_to(at(interval * PROBE - 1), tick=False)
        fetch("rakuten", [A, B, C])
        assert len(rakuten.requests) == interval  # not yet
        clock.move_to(at(interval * PROBE), tick=False)
        answers = fetch("rakuten", [B, C, A])
        fetch("rakuten", [A, B, C])  # a second caller in the same instant gets no probe
        assert len(rakuten.requests) == interval + 1
        assert rakuten.requests[-1]["itemCode"] == B  # the probe asks for the first key
        halt = MarketplaceHalt.objects.get()
        assert (halt.since, halt.probe_after) == (T0, at((interval + 1) * PROBE))
        assert answers[A].retry_after == PROBE


@pytest.mark.django_db
def test_the_probe_that_is_answered_lifts_the_halt_and_asks_the_rest(clock, rakuten, settings):
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    rakuten.versions.add("20220601")  # as if the operator had set a version Rakuten knows
    clock.move_to(at(PROBE), tick=False)
    answers = fetch("rakuten", [A, B, C])
    assert all(isinstance(answer, Observation) for answer in answers.values())
    assert [query["itemCode"] for query in rakuten.requests[1:]] == [A, B, C]
    assert not MarketplaceHalt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("trouble", ["server", "rate_limited", "stall"])
def test_a_probe_that_gets_no_answer_leaves_the_halt_to_the_next(clock, rakuten, settings, trouble):
    """A 5xx, a 429 or a timeout says nothing of the configuration."""
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    rakuten.versions.add("20220601")
    rakuten.behave[A] = trouble
    clock.move_to(at(PROBE), tick=False)
    answers = fetch("rakuten", [A, B])
    # The probed item waits for the halt too: its 5xx is the probe's, not a failure of its own.
    assert answers[A] == answers[B]
    assert answers[A].kind == FetchKind.CONFIG and "RAKUTEN_API_VERSION" in answers[A].detail
    assert len(rakuten.requests) == 2  # the first request, then the probe alone
    assert MarketplaceHalt.objects.get().probe_after == at(2 * PROBE)


@pytest.mark.django_db
def test_a_probe_that_finds_another_fault_keeps_the_halt_in_its_new_words(
    clock, rakuten, settings, caplog
):
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    settings.RAKUTEN_API_VERSION = "20260701"  # fixed, but the key is not
    settings.RAKUTEN_ACCESS_KEY = "pk_not-the-right-one"
    clock.move_to(at(PROBE), tick=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="watches.marketplaces.halts"):
        fetch("rakuten", [A])
    halt = MarketplaceHalt.objects.get()
    assert halt.since == T0
    assert halts.settings_named(halt.detail) == ["RAKUTEN_ACCESS_KEY", "RAKUTEN_APP_IDS"]
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "another configuration fault" in caplog.records[0].getMessage()


@pytest.mark.django_db
def test_the_log_says_it_when_the_halt_starts_and_when_it_lifts_not_per_item_or_run(
    clock, rakuten, settings, caplog
):
    for code in ("yasu-shop:x1", "yasu-shop:x2", "yasu-shop:x3"):
        rakuten.add(code)
        ListingFactory(source="rakuten", item_code=code, last_polled_at=None)
    retire_the_version(rakuten, settings)
    with caplog.at_level(logging.DEBUG):
        for step in range(6):  # polling runs and re-fetches, over two probes
            clock.move_to(at(step * 120), tick=False)
            poll()
            fetch("rakuten", [A, B, C])
        rakuten.versions.add("20220601")
        clock.move_to(at(3 * PROBE), tick=False)
        fetch("rakuten", [A, B])
        fetch("rakuten", [C])
    said = [r.getMessage() for r in caplog.records if r.name == "watches.marketplaces.halts"]
    assert len(said) == 2, said
    assert said[0].startswith("rakuten halted: it will not answer until a person acts.")
    assert "RAKUTEN_API_VERSION" in said[0]
    assert said[1] == "rakuten answers again: its halt is lifted after 15 min"


@pytest.mark.django_db
def test_with_several_ids_the_probe_goes_out_under_the_one_whose_fault_halted_rakuten(
    clock, rakuten, settings, caplog
):
    """One id's key is wrong, the other's right. A probe answered under the right one would
    lift the halt, and the next request under the wrong one start it again, every interval:
    the probe goes out under the id that faulted, so the halt holds, said once, until that
    key is fixed."""
    good, bad = "id-good", "id-bad"
    settings.RAKUTEN_APP_IDS = [good, bad]
    settings.RAKUTEN_ACCESS_KEYS = {**rakuten.accept(good, bad), bad: "pk_not-the-right-one"}
    ticks = FakeClock(sleeping_moves_time=False)
    for app_id in (good, bad):
        limiter = RateLimiter(1.0, clock=ticks, sleep=ticks.sleep)
        install_limiter(f"rakuten:{app_id}", settings.RAKUTEN_RATE_PER_SECOND, limiter)
    try:
        with caplog.at_level(logging.INFO, logger="watches.marketplaces.halts"):
            fetch("rakuten", [A, B, C])
            assert [q["applicationId"] for q in rakuten.requests] == [good, bad]
            for interval in (1, 2, 3):
                clock.move_to(at(interval * PROBE), tick=False)
                fetch("rakuten", [A, B, C])
                assert len(rakuten.requests) == 2 + interval, "the probe alone"
                assert rakuten.requests[-1]["applicationId"] == bad
                assert MarketplaceHalt.objects.get().since == T0
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and said[0].startswith("rakuten halted"), said
            assert MarketplaceHalt.objects.get().application == app_id_label(bad)

            rakuten.applications[bad] = "pk_not-the-right-one"  # as if its key were fixed
            clock.move_to(at(4 * PROBE), tick=False)
            answers = fetch("rakuten", [A, B, C])
        assert all(isinstance(answer, Observation) for answer in answers.values())
        assert rakuten.requests[5]["applicationId"] == bad
        assert not MarketplaceHalt.objects.exists()
    finally:
        for app_id in (good, bad):
            forget_limiter(f"rakuten:{app_id}", settings.RAKUTEN_RATE_PER_SECOND)


@pytest.mark.django_db
def test_a_probe_that_asks_nothing_leaves_the_halt_to_the_next(clock, rakuten, settings):
    """A key answered without a request (a page past the last one) says nothing of the
    configuration: it must not lift the halt."""
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    rakuten.versions.add("20220601")
    clock.move_to(at(PROBE), tick=False)
    past_the_last = Ask(Shape.SHOP, "yasu-shop", page=PAGE_MAX + 1)
    answers = halts.guard("rakuten", [past_the_last], RakutenMarketplace().pages, timezone.now())
    assert len(rakuten.requests) == 1
    assert MarketplaceHalt.objects.get().probe_after == at(2 * PROBE)
    assert answers[past_the_last].unasked


# --- the poll plan ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_plan_gives_a_halted_marketplace_its_probe_or_nothing(clock, rakuten, settings):
    listings = [
        ListingFactory(source="rakuten", item_code=code, last_polled_at=None) for code in (A, B)
    ]
    WatchFactory(listing=listings[1], target_price=2000)
    demo = ListingFactory(last_polled_at=None)
    retire_the_version(rakuten, settings)
    fetch("rakuten", [C])

    def planned(now):
        return [(item.source, item.listing_id) for item in plan(due_listings(now), now)]

    assert planned(at(PROBE - 1)) == [("demo", demo.pk)]
    # The probe's one request goes to the listing the plan ranks first: the watched one.
    assert planned(at(PROBE)) == [("rakuten", listings[1].pk), ("demo", demo.pk)]


@pytest.mark.django_db
def test_polling_resumes_by_itself_once_a_probe_is_answered(clock, rakuten, settings):
    listings = [
        ListingFactory(source="rakuten", item_code=code, last_polled_at=None) for code in (A, B, C)
    ]
    retire_the_version(rakuten, settings)
    assert poll().errors == 3  # the first request halts Rakuten; the others are not asked
    assert len(rakuten.requests) == 1
    rakuten.versions.add("20220601")
    rakuten.set(A, price=880)
    # The halted answers counted as polls: the listings are due again after half of
    # POLL_MINUTES (15), past the probe time.
    clock.move_to(at(8 * 60), tick=False)
    result = poll()  # the plan's one probe, answered: the halt is lifted
    assert (result.listings, result.observations) == (1, 1)
    assert len(rakuten.requests) == 2
    assert not MarketplaceHalt.objects.exists()
    clock.move_to(at(10 * 60), tick=False)
    result = poll()  # the next run polls the rest
    assert (result.listings, result.observations) == (2, 2)
    assert len(rakuten.requests) == 4
    assert Listing.objects.get(item_code=A).price == 880
    for listing in listings:
        listing.refresh_from_db()
        assert listing.last_error == "" and listing.last_polled_at >= at(8 * 60)


@pytest.mark.django_db
def test_intake_by_link_asks_nothing_of_a_halted_marketplace(clock, rakuten, settings, client):
    from watches.intake import IntakeError, ItemRef, fetch_first

    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    with pytest.raises(IntakeError) as caught:
        fetch_first(ItemRef("rakuten", B))
    assert caught.value.code == "unreachable"
    assert len(rakuten.requests) == 1


# --- two callers at once ------------------------------------------------------------------


def caller(start: threading.Barrier, errors: list[BaseException], codes: list[str]) -> None:
    """One caller of the adapter (a poller's batch, a dispatcher's re-fetch) in a thread."""
    try:
        start.wait()
        fetch("rakuten", codes)
    except BaseException as exc:
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_exactly_one_probe_per_interval_with_two_threads_asking_at_once(clock, rakuten, settings):
    """Two pollers (or dispatchers) of one host asking in the same instant: the conditional
    UPDATE of `probe_after` gives the probe to one of them."""
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    for interval in (1, 2, 3, 4, 5):
        clock.move_to(at(interval * PROBE), tick=False)
        start = threading.Barrier(2)
        errors: list[BaseException] = []
        threads = [threading.Thread(target=caller, args=(start, errors, [A, B])) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert len(rakuten.requests) == 1 + interval
    assert rakuten.requests[-1]["itemCode"] == A
    assert rakuten.received[-1].path == f"{BASE_PATH}/20220601"


@pytest.mark.django_db
def test_a_device_watching_through_a_halted_marketplace_is_not_an_error_page(
    clock, rakuten, settings, client
):
    """The pages never ask a marketplace: a halt changes nothing on them."""
    listing = ListingFactory(source="rakuten", item_code=A)
    WatchFactory(listing=listing, device=DeviceFactory())
    retire_the_version(rakuten, settings)
    fetch("rakuten", [A])
    assert client.get(f"/listings/{listing.pk}/").status_code == 200
    assert len(rakuten.requests) == 1


@pytest.mark.django_db
def test_a_late_probe_answer_does_not_lift_a_halt_started_after_it_was_sent(clock, settings):
    """A probe's request is slow; meanwhile another probe lifted the halt it was sent for, and
    a new fault halted the marketplace again. The late answer says nothing of the new one."""
    fault = FetchError(FetchKind.CONFIG, "set RAKUTEN_API_VERSION", application="aaaa")
    halts.record("rakuten", {"x": fault}, at(0))
    first = MarketplaceHalt.objects.get()
    clock.move_to(at(PROBE), tick=False)

    def slow_probe(codes):
        MarketplaceHalt.objects.filter(pk=first.pk).delete()  # another probe, answered
        other = FetchError(FetchKind.CONFIG, "Rakuten refused application #bbbb")
        halts.record("rakuten", {"y": other}, at(PROBE + 10))  # then another id refused
        return {code: FetchError(FetchKind.NOT_FOUND, "404") for code in codes}

    halts.guard("rakuten", ["a"], slow_probe, at(PROBE))

    assert MarketplaceHalt.objects.get().detail == "Rakuten refused application #bbbb"
