"""The reliability suite: the promise (never twice, never lost) under many dispatcher
processes, SIGKILLed dispatchers, random faults of the outside world, and a Redis broker.

Every test runs in two sizes: small by default (part of `make test`, a few seconds each) and
full with `--reliability-full` or RELIABILITY_FULL=1 (`make test-reliability`, run by CI on
PostgreSQL). Each test reports its figures — deliveries, duplicates, lost, terminal — which
are printed at the end of the run (and at once with `-s`)."""

from __future__ import annotations

import os

import pytest

_FIGURES = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/reliability/" in item.nodeid:
            item.add_marker(pytest.mark.reliability)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(_FIGURES, [])
    if not lines:
        return
    size = "full" if _full(config) else "small"
    terminalreporter.section(f"reliability figures ({size})")
    for line in lines:
        terminalreporter.write_line(line)


def _full(config) -> bool:
    return bool(config.getoption("--reliability-full")) or os.environ.get(
        "RELIABILITY_FULL", ""
    ).strip().lower() in {"1", "true", "yes", "on"}


@pytest.fixture
def full(request) -> bool:
    """Whether the suite runs at full size."""
    return _full(request.config)


@pytest.fixture
def figures(request):
    """`figures(name, **numbers)`: record one line of figures for the end-of-run summary."""
    from django.db import connection

    def record(name: str, **numbers) -> str:
        shown = " ".join(f"{key}={value}" for key, value in numbers.items())
        line = f"{name} [{connection.vendor}] {shown}"
        request.config.stash.setdefault(_FIGURES, []).append(line)
        print(line)
        return line

    return record
