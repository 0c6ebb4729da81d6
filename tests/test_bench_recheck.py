"""bench/bench_recheck.py at a tiny size, so it cannot rot: both paths go through the real
dispatcher, adapter and limiter against its fake Ichiba on the simulated clock; the switch it
uses for the path before shop feeds really makes the re-check ask item by item; neither path
ever asks twice in one simulated second."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench_recheck():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_recheck", BENCH / "bench_recheck.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_recheck"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_recheck", None)
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("interleaved", [False, True], ids=["shop by shop", "interleaved"])
def test_the_recheck_bench_runs_small_item_by_item_and_by_shop_pages(
    bench_recheck, capsys, interleaved
):
    # 3 shops of 4 watched listings: 12 item requests, or 3 shop pages, each path's re-check
    # within the freshness bound, so every row goes out in the first cycle — in either order
    # the rows fall due.
    args = argparse.Namespace(
        shops=3,
        watched=4,
        catalogue=40,
        rounds=1,
        horizon_minutes=10,
        batch_size=None,
        cycles=False,
        interleaved=interleaved,
    )
    with transaction.atomic():
        results = bench_recheck.simulate(args)
        transaction.set_rollback(True)

    by_path = {result.path: result for result in results}
    items, pages = by_path["items"], by_path["shop pages"]
    assert (items.items, sum(items.pages.values())) == (12, 0)
    assert (pages.items, dict(pages.pages)) == (0, {1: 3})
    for result in results:
        assert result.final["sent"] == 12 and not result.retries
        assert result.drained is not None and result.drained < 60
        assert result.busiest == {bench_recheck.APP_ID: 1}
        assert result.too_many == 0
    assert "target, shop pages drained within 10 min: met" in capsys.readouterr().out
