"""Re-checks in flight: a dispatcher does not ask a page another dispatcher is asking; it waits
for that answer and reuses it, within its freshness bound (`watches.polling.inflight`).

The other dispatcher is played here in this process — its mark in the shared `locks` cache,
its request to the fake Ichiba made while this one waits; bench/bench_dispatchers.py counts
the requests of four real processes on one id."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.core.cache import caches
from django.db import transaction

from tests.factories import ichiba_offers
from tests.fakes.clock import FakeClock
from watches import services
from watches.marketplaces.base import FetchKind, Observation, Offers
from watches.models import Listing, OfferPage, Product
from watches.polling import inflight
from watches.products.polling import note_pages_read, save_poll_state

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
BOUND = dt.timedelta(seconds=30)
JAN = "4901750404406"


@pytest.fixture
def offers(time_machine, ichiba):
    """Three shops' offers of one product, last polled an hour ago at 1,000 yen; each sells
    it at 900 now."""
    time_machine.move_to(T0, tick=False)
    product, _ = ichiba_offers(
        ichiba,
        JAN,
        price_now=900,
        price=1000,
        shipping=0,
        last_polled_at=T0 - dt.timedelta(hours=1),
    )
    return product


def loaded() -> list[Listing]:
    return list(Listing.objects.order_by("pk"))


def unit(product: Product) -> tuple[str, str, int]:
    return ("offers", "rakuten", product.pk)


def waiting_with(monkeypatch, **how) -> None:
    """`inflight.wait_for` waits on `how`'s clock and pause (another dispatcher's doings)."""
    wait_for = inflight.wait_for
    monkeypatch.setattr(
        inflight, "wait_for", lambda units, seconds: wait_for(units, seconds, **how)
    )


def keyword_requests(ichiba) -> list[str]:
    return [q["keyword"] for q in ichiba.requests if "keyword" in q]


def test_a_recheck_waits_for_the_page_another_dispatcher_is_asking_and_reuses_its_answer(
    offers, ichiba, monkeypatch
):
    theirs = inflight.mark([unit(offers)], BOUND.total_seconds())
    pauses: list[float] = []

    def the_other_dispatcher_answers(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            services.refetch(loaded(), T0)  # its request, through the same rule
            theirs.release()

    waiting_with(monkeypatch, pause=the_other_dispatcher_answers)

    mine = loaded()
    answers, reused = services.refetch_or_reuse(mine, T0, fresh_within=BOUND, as_loaded=True)

    assert keyword_requests(ichiba) == [JAN], "the page asked once, by the other dispatcher"
    assert not [q for q in ichiba.requests if "keyword" not in q]
    assert len(pauses) == 1
    assert {pk: a.price for pk, a in answers.items()} == {listing.id: 900 for listing in mine}
    assert all(isinstance(a, Observation) for a in answers.values())
    assert reused == {listing.id for listing in mine}, "reused: nothing asked by this one"
    assert [listing.price for listing in mine] == [900] * 3, "its listings read again"


def test_a_mark_left_by_a_dispatcher_that_died_is_waited_for_only_as_long_as_an_answer_stays_fresh(
    offers, ichiba, monkeypatch
):
    inflight.mark([unit(offers)], BOUND.total_seconds())  # and then its process was killed
    clock = FakeClock()
    start = clock.now
    waiting_with(monkeypatch, clock=clock, pause=clock.sleep)

    answers, reused = services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    waited = clock.now - start
    # The bound counts from the re-check's start (this call's own time comes off the wait).
    assert BOUND.total_seconds() / 2 < waited <= BOUND.total_seconds()
    assert keyword_requests(ichiba) == [JAN], "asked by this one once the wait was over"
    assert {a.price for a in answers.values()} == {900}
    assert reused == set()


def test_a_recheck_marks_what_it_asks_while_it_asks_and_not_after(offers, ichiba, monkeypatch):
    seen: list[object] = []
    ask = services._ask

    def asking(listings):
        seen.append(caches[inflight.CACHE].get(inflight.key(unit(offers))))
        return ask(listings)

    monkeypatch.setattr(services, "_ask", asking)

    services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    assert len(seen) == 1 and seen[0] is not None, "marked while it asked"
    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None, "and not after"
    assert keyword_requests(ichiba) == [JAN]


def test_a_recheck_that_fails_while_asking_leaves_no_mark_behind(offers, monkeypatch):
    def crash(listings):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(services, "_ask", crash)

    with pytest.raises(RuntimeError):
        services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None


def test_a_mark_another_process_took_after_ours_expired_is_left_to_it(offers):
    ours = inflight.mark([unit(offers)], 1)
    caches[inflight.CACHE].set(inflight.key(unit(offers)), "another process", timeout=30)

    ours.release()

    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) == "another process"


def test_a_fresh_answer_is_reused_without_marking_anything(offers, ichiba):
    services.refetch(loaded(), T0)  # a poll, a moment ago
    ichiba.requests.clear()

    answers, reused = services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND)

    assert not ichiba.requests
    assert reused == set(answers)
    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None


def test_an_answer_stored_between_the_batchs_read_and_its_marks_is_reused(offers, ichiba):
    mine = loaded()  # the batch read its listings: not fresh
    services.refetch(loaded(), T0)  # then another dispatcher answered, and let go
    ichiba.requests.clear()

    answers, reused = services.refetch_or_reuse(mine, T0, fresh_within=BOUND, as_loaded=True)

    assert not ichiba.requests, "its answer, read again once marked, not asked twice"
    assert reused == {listing.id for listing in mine}
    assert {a.price for a in answers.values()} == {900}


def test_a_cache_that_cannot_be_reached_marks_nothing_and_the_recheck_asks(
    offers, ichiba, monkeypatch
):
    def down(*args, **kwargs):
        raise ConnectionError("the locks cache is down")

    cache = caches[inflight.CACHE]
    for name in ("add", "get_many", "delete_many"):
        monkeypatch.setattr(cache, name, down)

    answers, reused = services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    assert keyword_requests(ichiba) == [JAN], "asked, unmarked"
    assert {a.price for a in answers.values()} == {900}
    assert reused == set()


def test_a_wait_ends_when_the_cache_cannot_be_read(monkeypatch):
    clock = FakeClock()
    start = clock.now
    inflight.mark([("listing", 1)], 30)  # another process's

    def down(*args, **kwargs):
        raise ConnectionError("the locks cache is down")

    monkeypatch.setattr(caches[inflight.CACHE], "get_many", down)
    inflight.wait_for([("listing", 1)], 30, clock=clock, pause=clock.sleep)
    assert clock.now == start, "no wait on marks nobody can read"


# A product watch's re-check asks the product's page of offers: the same unit, the same rule.


def poll_offers_at(product: Product, moment: dt.datetime, time_machine) -> None:
    time_machine.move_to(moment, tick=False)
    services.refetch_products([product], moment)  # as a poll of its page keeps it
    time_machine.move_to(T0, tick=False)


def test_a_products_offers_a_poll_observed_within_the_bound_are_its_answer(
    offers, ichiba, time_machine
):
    poll_offers_at(offers, T0 - dt.timedelta(seconds=10), time_machine)
    ichiba.requests.clear()

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert not ichiba.requests, "nothing asked"
    assert answer.reused
    assert answer.observed_at() == T0 - dt.timedelta(seconds=10)
    assert {result.price for _, result in answer.offers} == {900}
    assert len(answer.offers) == 3
    assert {error.kind for error in answer.errors} <= {FetchKind.EMPTY}, "the demo has none"
    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None, "nothing marked"


def test_a_products_offers_older_than_the_bound_are_asked(offers, ichiba, time_machine):
    poll_offers_at(offers, T0 - dt.timedelta(seconds=31), time_machine)
    ichiba.requests.clear()

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert keyword_requests(ichiba) == [JAN]
    assert not answer.reused


def test_a_product_with_one_offer_not_observed_since_is_asked(offers, ichiba, time_machine):
    poll_offers_at(offers, T0 - dt.timedelta(seconds=10), time_machine)
    Listing.objects.filter(item_code="shop1:scottie-12").update(
        last_polled_at=T0 - dt.timedelta(minutes=5)
    )
    ichiba.requests.clear()

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert keyword_requests(ichiba) == [JAN], "a page not read whole since: asked"
    assert not answer.reused


@pytest.mark.parametrize(
    ("other", "asked_again"),
    [
        # Another dispatcher's product re-check reads the page whole: its answer is ours.
        ("product", False),
        # A listing re-check of the same offers asks the same page (one unit, so we wait),
        # but keeps only its batch's offers: a shop we do not know could be on it, unseen.
        ("listings", True),
    ],
)
def test_a_products_recheck_waits_for_the_page_another_dispatcher_is_asking(
    offers, ichiba, monkeypatch, other, asked_again
):
    theirs = inflight.mark([unit(offers)], BOUND.total_seconds())

    def the_other_dispatcher_answers(seconds: float) -> None:
        if other == "product":
            services.refetch_products([offers], T0)
        else:
            services.refetch(loaded(), T0)
        theirs.release()

    waiting_with(monkeypatch, pause=the_other_dispatcher_answers)

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert keyword_requests(ichiba) == [JAN] * (2 if asked_again else 1)
    assert answer.reused is not asked_again
    assert {result.price for _, result in answer.offers} == {900}


def test_offers_each_observed_since_do_not_stand_for_a_page_not_read_since(
    offers, ichiba, time_machine
):
    # A shop began selling it at 850 after its page was last read; each known offer was
    # observed 10 s ago by requests of their own (a listing re-check, a shop's feed).
    poll_offers_at(offers, T0 - dt.timedelta(minutes=10), time_machine)
    ichiba.add("shop9:scottie-12", price=850, jan=JAN)
    time_machine.move_to(T0 - dt.timedelta(seconds=10), tick=False)
    services.refetch(loaded(), T0 - dt.timedelta(seconds=10))
    time_machine.move_to(T0, tick=False)
    ichiba.requests.clear()

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert keyword_requests(ichiba) == [JAN], "the page asked: it was not read within the bound"
    assert not answer.reused
    best = answer.best()
    assert best is not None and best[0].item_code == "shop9:scottie-12"


def test_a_products_recheck_marks_its_page_while_it_asks(offers, ichiba, monkeypatch):
    from watches.products import refetch

    seen = []
    ask = refetch.fetch_offers

    def asking(source, jans):
        if source == "rakuten":
            seen.append(caches[inflight.CACHE].get(inflight.key(unit(offers))))
        return ask(source, jans)

    monkeypatch.setattr(refetch, "fetch_offers", asking)

    [answer] = services.refetch_products([offers], T0, fresh_within=BOUND).values()

    assert len(seen) == 1 and seen[0] is not None, "marked while asking"
    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None, "and not after"
    assert not answer.reused


def test_a_products_recheck_records_its_read_at_the_answers_moment_not_the_cycles(
    offers, ichiba, time_machine
):
    # The cycle began at T0; the budget (or another dispatcher's mark) held the ask 20 s.
    asked = T0 + dt.timedelta(seconds=20)
    time_machine.move_to(asked, tick=False)

    services.refetch_products([offers], T0, fresh_within=BOUND)

    assert OfferPage.objects.get(product=offers, source="rakuten").read_at == asked
    assert {listing.last_polled_at for listing in loaded()} == {asked}


def test_a_read_saved_after_a_later_one_does_not_move_the_page_or_the_product_back(
    offers, ichiba, time_machine
):
    later, earlier = T0 + dt.timedelta(seconds=30), T0 + dt.timedelta(seconds=20)
    time_machine.move_to(later, tick=False)
    services.refetch_products([offers], later)  # a poll, answered last
    offers.refresh_from_db()
    answer = Offers(jan=JAN, offers=(), observed_at=earlier)
    offers.last_polled_at, offers.last_error = earlier, "rakuten bad_response: older"

    with transaction.atomic():  # a re-check answered first, saved after
        note_pages_read("rakuten", [offers], {JAN: answer})
        save_poll_state([offers])

    assert OfferPage.objects.get(product=offers, source="rakuten").read_at == later
    offers.refresh_from_db()
    assert (offers.last_polled_at, offers.last_error) == (later, "")
