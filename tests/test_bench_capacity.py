"""bench/bench_capacity.py at a tiny size, so it cannot rot: it runs every scenario through
the real plan, adapter and limiter against its fake Ichiba, never goes over 1 request/s per
application id, and its simulated judging (the first observation at or below a target) finds
exactly what the real polling path enqueues."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_capacity(settings):
    # A run of 30 s every 15 min: 24 requests per id, so 200 listings are more than a run can
    # ask about, and 8 runs in 2 hours keep the test short.
    settings.POLL_MAX_SECONDS = 30
    settings.POLL_EVERY_MINUTES = 15
    # The plan of one request an item: this world's shops and products are not modelled yet.
    settings.POLL_SHAPES = ["item"]
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_capacity", BENCH / "bench_capacity.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_the_capacity_bench_runs_small_and_its_judging_agrees_with_polling(bench_capacity, capsys):
    def run(judge: str) -> list:
        # Each run builds its world afresh: the first one's is rolled back.
        with transaction.atomic():
            rows = bench_capacity.simulate(200, 2_000, hours=2, ids=[1, 2], judge=judge)
            transaction.set_rollback(True)
        return rows

    simulated = run("sim")
    printed = capsys.readouterr().out
    real = run("real")

    assert [(row.ids, row.order) for row in simulated] == [
        (1, "plan"),
        (1, "oldest-first"),
        (2, "plan"),
        (2, "oldest-first"),
    ]
    for row in simulated:
        assert row.requests == row.ids * 24 * 8  # 8 runs in 2 hours, each its whole budget
        assert row.busiest_second == 1
        assert row.too_many == 0
        assert row.crossed > 0
    assert sum(row.detected for row in simulated) > 0
    # The simulated judging is what polling enqueues, watch by watch, to the second.
    for sim_row, real_row in zip(simulated, real, strict=True):
        assert sim_row.detections == real_row.detections
        assert sim_row.requests == real_row.requests
    assert "| 2 | oldest-first |" in printed
    assert "what to buy" in printed
