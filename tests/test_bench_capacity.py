"""bench/bench_capacity.py at a tiny size, so it cannot rot: every scenario (today's plan of one
item a request, the new plan of items, shops' feeds and products' offers; a size world and a
sensitivity world) runs through the real polling entry point, adapter and limiter against its
fake Ichiba, never goes over 1 request/s for the application id, and its simulated judging
(the first observation at or below a target) finds exactly what the real polling path
enqueues. Not timed: the figures are the bench's."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_capacity(settings):
    # A run of 30 s every 15 min: 24 requests, so 200 listings are more than a run can ask
    # about, and 10 runs in 2.5 hours keep the test short.
    settings.POLL_MAX_SECONDS = 30
    settings.POLL_EVERY_MINUTES = 15
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_capacity", BENCH / "bench_capacity.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_the_capacity_bench_runs_small_and_its_judging_agrees_with_polling(bench_capacity, capsys):
    from _capacity_world import Params

    small = Params(listings=200, shops=30, watches=2_000, hours=2.5)
    worlds = [(small, 48.0), (Params(listings=200, shops=8, watches=2_000, hours=2.5), None)]

    def run(judge: str) -> list:
        # Each run builds its worlds afresh: the first one's are rolled back.
        with transaction.atomic():
            rows = bench_capacity.simulate(worlds, judge, warmup_hours=1, sizes=1, tail_hours=0.5)
            transaction.set_rollback(True)
        return rows

    simulated = run("sim")
    printed = capsys.readouterr().out
    real = run("real")

    assert [row.plan for row in simulated] == ["today", "new", "today", "new"]
    for row in simulated:
        # 6 runs after the first hour, each its whole budget (today's plan always has a
        # listing to ask; the new one stops when what is left is already answered).
        assert row.requests == 24 * 6 if row.plan == "today" else 0 < row.requests <= 24 * 6
        assert row.busiest_second == 1
        assert row.too_many == 0
        assert row.crossed > 0
    today, new = simulated[0], simulated[1]
    assert set(today.by_shape) == {"item"}, "today's plan asks one item a request"
    assert new.by_shape.get("shop") and new.by_shape.get("product")
    assert new.observed > new.requests, "a page or a product's offers answers several"
    assert sum(row.detected for row in simulated) > 0
    # The simulated judging is what polling enqueues, watch by watch, to the second.
    for sim_row, real_row in zip(simulated, real, strict=True):
        assert sim_row.detections == real_row.detections
        assert sim_row.requests == real_row.requests
    assert "sensitivity" in printed
    assert "targets at 200 watched listings" in printed
    # Each world's parameters are printed with its results.
    assert "200 watched listings over 30 shops, Zipf exponent 1" in printed
    assert "200 watched listings over 8 shops" in printed
    assert "catalogue 20× the listings watched in it" in printed
    assert "30% of watched listings offers of a product (a JAN code) sold by 2–20 shops" in printed
    assert "on other edits every 48 h on average" in printed
    assert "on other edits never" in printed
    assert "a sale (8–30 % off, 30 min to 3 h) starts on 12% of items every 6 h" in printed


def test_clearing_a_world_leaves_no_row_of_it_behind(bench_capacity):
    # SQLite checks foreign keys at COMMIT: inside the test's transaction a table the clearing
    # forgot would go unnoticed, so every table is counted instead.
    from _capacity_world import Params, clear_world
    from django.apps import apps

    def rows() -> dict[str, int]:
        return {
            model._meta.db_table: model._default_manager.count()
            for app in ("watches", "outbox")
            for model in apps.get_app_config(app).get_models()
        }

    world = [(Params(listings=200, shops=30, watches=2_000, hours=1.5), 48.0)]
    with transaction.atomic():
        before = rows()
        bench_capacity.simulate(world, "sim", warmup_hours=1, sizes=1, tail_hours=0.25)
        clear_world()
        after = rows()
        transaction.set_rollback(True)
    assert after == before


def test_the_capacity_bench_runs_a_yahoo_world_through_the_yahoo_adapter(bench_capacity, capsys):
    """The same world on Yahoo! Shopping: one appid at 1 query/s against the fake Yahoo, store
    items asked within their store, products' offers by JAN code; its judging agrees with
    polling there too."""
    from _capacity_world import Params

    world = Params(listings=200, shops=30, watches=2_000, hours=2.5, marketplace="yahoo")

    def run(judge: str) -> list:
        with transaction.atomic():
            rows = bench_capacity.simulate(
                [(world, 48.0)], judge, warmup_hours=1, sizes=1, tail_hours=0.5
            )
            transaction.set_rollback(True)
        return rows

    simulated = run("sim")
    printed = capsys.readouterr().out
    real = run("real")

    today, new = simulated
    assert (today.marketplace, new.marketplace) == ("yahoo", "yahoo")
    assert today.requests == 24 * 6 and set(today.by_shape) == {"item"}
    assert 0 < new.requests <= 24 * 6 and new.by_shape.get("product")
    assert new.observed > new.requests, "a product's offers answer several"
    for row in simulated:
        assert row.busiest_second == 1
        assert row.too_many == 0
        assert row.crossed > 0
    assert sum(row.detected for row in simulated) > 0
    for sim_row, real_row in zip(simulated, real, strict=True):
        assert sim_row.detections == real_row.detections
    assert "Yahoo! Shopping: 200 watched listings over 30 shops" in printed
    assert "Yahoo! Shopping, targets at 200 watched listings" in printed
    assert "fake Yahoo! Shopping: at most 1 request(s) of the id" in printed


def test_the_few_ceiling_counts_products_wider_than_a_shop_page_first_and_caps_at_all(
    bench_capacity,
):
    from _capacity_runs import few_ceiling
    from _capacity_world import PRICE_MOVES_PER_HOUR, Item, Params, World

    # 100 listings one to three people watch, one popular; a product of 20 offers (one of
    # them the popular listing: 19 of the few) and one of 5. Without other edits a page of
    # 30 of a shop's latest changes shows 30 / (20 × 0.0865) ≈ 17 listings' hour.
    items = [Item(f"s:w{n}", 0, 100, 90, [0.0], [100]) for n in range(101)]
    items[0].popular = True
    products = {"4900000000001": list(range(20)), "4900000000002": list(range(20, 25))}
    world = World(Params(listings=101, edit_hours=None), items, [], products, 3 * 3600.0)
    page = 30 / (20 * PRICE_MOVES_PER_HOUR)
    assert 5 < page < 19

    # The 19-offer product first, the 5-offer one never (a shop page shows more).
    assert few_ceiling(world, 3) == pytest.approx((19 + 2 * page) / 100)
    assert few_ceiling(world, 1) == pytest.approx(19 / 100)
    assert few_ceiling(world, 50) == 1.0


def test_a_plan_is_worse_on_fewer_detections_more_watches_told_later_or_a_median_a_minute_later(
    bench_capacity,
):
    from _capacity_runs import Row

    def row(plan: str, detected: int, p50: float | None, delays: dict[int, float]) -> Row:
        return Row(
            world="w", plan=plan, watched=10, requests=10, by_shape={}, observed=10,
            within_15m=0.0, within_1h=0.0, known_15m=0.0, crossed=100, detected=detected,
            p50=p50, p95=None, bound=1.0, too_many=0, busiest_second=1, wall=0.0,
            detections={}, delays=delays,
        )  # fmt: skip

    today = row("today", 90, 400.0, {1: 100.0, 2: 100.0, 3: 100.0})
    # 16 s later on the median, two watches told sooner and one later: no worse.
    assert not bench_capacity._worse(row("new", 90, 416.0, {1: 50, 2: 50, 3: 500}), today)
    # More watches told later than sooner.
    assert bench_capacity._worse(row("new", 90, 400.0, {1: 50, 2: 500, 3: 500}), today)
    # Fewer crossings detected.
    assert bench_capacity._worse(row("new", 89, 400.0, {1: 50, 2: 50, 3: 50}), today)
    # A median a minute later, or never told where today's was.
    assert bench_capacity._worse(row("new", 90, 460.0, {1: 50, 2: 50, 3: 50}), today)
    assert bench_capacity._worse(row("new", 90, None, {1: 50, 2: 50, 3: 50}), today)


def test_the_delay_of_the_crossings_told_leaves_out_those_never_told(bench_capacity):
    from _capacity_runs import Row

    never = float("inf")
    # 20 crossed watches: 18 told after 1..18 minutes, 2 never told. Counting those two as
    # never, the 95th percentile is never reached; of the 18 told, it is 18 minutes.
    delays = {n: 60.0 * (n + 1) for n in range(18)} | {18: never, 19: never}
    row = Row(
        world="w", plan="new", watched=20, requests=10, by_shape={}, observed=10,
        within_15m=0.0, within_1h=0.0, known_15m=0.0, crossed=20, detected=18,
        p50=600.0, p95=None, bound=1.0, too_many=0, busiest_second=1, wall=0.0,
        detections={}, delays=delays,
    )  # fmt: skip

    assert bench_capacity.told_percentile(row, 0.95) == 18 * 60.0
    assert bench_capacity.told_percentile(row, 0.5) == 10 * 60.0
    assert bench_capacity.told_percentile(replace(row, delays={1: never}), 0.95) is None
