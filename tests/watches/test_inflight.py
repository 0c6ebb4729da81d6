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

from tests.factories import ListingFactory
from tests.fakes.clock import FakeClock
from watches import services
from watches.marketplaces.base import Observation
from watches.models import Listing, Product
from watches.polling import inflight

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
    product = Product.objects.create(jan=JAN, name="Scottie 12 rolls")
    for n in range(3):
        code = f"shop{n}:scottie-12"
        ichiba.add(code, price=900, jan=JAN)
        ListingFactory(
            source="rakuten",
            item_code=code,
            price=1000,
            shipping=0,
            product_id=product.pk,
            jan=JAN,
            last_polled_at=T0 - dt.timedelta(hours=1),
        )
    return product


def loaded() -> list[Listing]:
    return list(Listing.objects.order_by("pk"))


def unit(product: Product) -> tuple[str, str, int]:
    return ("offers", "rakuten", product.pk)


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

    wait_for = inflight.wait_for
    monkeypatch.setattr(
        inflight,
        "wait_for",
        lambda units, seconds: wait_for(units, seconds, pause=the_other_dispatcher_answers),
    )

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
    wait_for = inflight.wait_for
    monkeypatch.setattr(
        inflight,
        "wait_for",
        lambda units, seconds: wait_for(units, seconds, clock=clock, pause=clock.sleep),
    )

    answers, reused = services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    waited = clock.now - start
    assert BOUND.total_seconds() <= waited < BOUND.total_seconds() + 2 * inflight.POLL_SECONDS
    assert keyword_requests(ichiba) == [JAN], "asked by this one once the wait was over"
    assert {a.price for a in answers.values()} == {900}
    assert reused == set()


def test_a_recheck_marks_what_it_asks_while_it_asks_and_not_after(offers, ichiba, monkeypatch):
    seen: list[object] = []
    ask = services._ask

    def asking(listings, now):
        seen.append(caches[inflight.CACHE].get(inflight.key(unit(offers))))
        return ask(listings, now)

    monkeypatch.setattr(services, "_ask", asking)

    services.refetch_or_reuse(loaded(), T0, fresh_within=BOUND, as_loaded=True)

    assert len(seen) == 1 and seen[0] is not None, "marked while it asked"
    assert caches[inflight.CACHE].get(inflight.key(unit(offers))) is None, "and not after"
    assert keyword_requests(ichiba) == [JAN]


def test_a_recheck_that_fails_while_asking_leaves_no_mark_behind(offers, monkeypatch):
    def crash(listings, now):
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
