"""The demo app is installed only with DEMO_MARKET: by default under DEBUG or where no real
marketplace is configured. Without it, production code still imports, migrates, checks and
polls, and a later switch-on adopts the demo table the first migrations made. Each case is a
fresh process: INSTALLED_APPS is read once, at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.catalogue import CATALOGUE

BASE = Path(__file__).resolve().parents[2]
# A production with Rakuten: an application id with its access key.
RAKUTEN = {"RAKUTEN_APP_ID": "x", "RAKUTEN_ACCESS_KEY": "pk_x"}

# Imports every module of the production packages, then reports what is installed and whether
# anything pulled in a demo module.
PROBE = """
import json, pkgutil, importlib, sys
import django
django.setup()
from django.conf import settings
for package in ("watches", "outbox", "yasugoro"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if ".migrations." not in info.name and not info.name.endswith("settings_test"):
            importlib.import_module(info.name)
print(json.dumps({
    "installed": "demo" in settings.INSTALLED_APPS,
    "adapters": sorted(settings.MARKETPLACE_ADAPTERS),
    "tick": settings.DEMO_TICK,
    "demo_modules": sorted(m for m in sys.modules if m == "demo" or m.startswith("demo.")),
}))
"""


def environment(tmp_path: Path, **variables: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # The test process's own settings set some of these: each case starts from none.
        if key
        not in {
            "DEBUG",
            "DEMO_MARKET",
            "DEMO_TICK",
            "RAKUTEN_APP_ID",
            "RAKUTEN_APP_IDS",
            "RAKUTEN_ACCESS_KEY",
            "DATABASE_URL",
        }
    }
    env.update(
        DJANGO_SETTINGS_MODULE="yasugoro.settings",
        VAPID_SUBJECT="mailto:tests@yasugoro.example",
        YASUGORO_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        LOG_LEVEL="WARNING",
    )
    env.update(variables)
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=BASE, env=env, capture_output=True, text=True, check=False
    )


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = run(env, "manage.py", *args)
    assert result.returncode == 0, result.stderr
    return result


def probe(env: dict[str, str]) -> dict:
    result = run(env, "-c", PROBE)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("variables", "installed", "tick"),
    [
        ({}, True, False),  # production without a real marketplace: the demo is all there is
        (RAKUTEN, False, False),  # production with Rakuten: no demo
        ({"DEBUG": "1", **RAKUTEN}, True, True),  # development: always the demo
        ({"DEBUG": "1", "DEMO_MARKET": "0"}, False, False),
        ({**RAKUTEN, "DEMO_MARKET": "1", "DEMO_TICK": "1"}, True, True),
    ],
    ids=["production", "production-with-rakuten", "debug", "switched-off", "switched-on"],
)
def test_the_demo_is_installed_where_an_operator_expects_it(tmp_path, variables, installed, tick):
    seen = probe(environment(tmp_path, **variables))
    assert seen["installed"] is installed
    assert ("demo" in seen["adapters"]) is installed
    assert seen["tick"] is tick
    if not installed:
        # Importing every production module never pulls the demo in.
        assert seen["demo_modules"] == []


def test_a_demo_tick_without_a_demo_market_is_one_clear_error(tmp_path):
    result = run(environment(tmp_path, DEMO_MARKET="0", DEMO_TICK="1"), "manage.py", "check")
    assert result.returncode != 0
    assert "DEMO_TICK needs DEMO_MARKET: there is no demo market to move" in result.stderr


def test_without_the_demo_production_migrates_checks_and_polls_then_adopts_it_later(tmp_path):
    without = environment(tmp_path, **RAKUTEN)
    manage(without, "migrate", "--noinput")
    manage(without, "check")
    manage(without, "makemigrations", "--check", "--dry-run")
    assert "listings=0" in manage(without, "poll_prices").stdout
    unknown = run(without, "manage.py", "demo_market", "list")
    assert unknown.returncode != 0 and "Unknown command: 'demo_market'" in unknown.stderr
    # The table the first migration of watches made waits, empty and under the demo's name;
    # nothing schedules a demo tick.
    state = manage(
        without,
        "shell",
        "--no-imports",
        "-c",
        "from django.db import connection; from django_q.models import Schedule; "
        "print([t for t in connection.introspection.table_names() if 'demoproduct' in t]); "
        "print(Schedule.objects.filter(name='demo-tick').count())",
    ).stdout.splitlines()
    assert state == ["['demo_demoproduct']", "0"]

    # Switched on later: the demo's migrations take up the table and the catalogue loads.
    with_demo = environment(tmp_path, **RAKUTEN, DEMO_MARKET="1", DEMO_TICK="1")
    migrated = manage(with_demo, "migrate", "--noinput").stdout
    assert "Applying demo.0001_initial... OK" in migrated
    seeded = manage(with_demo, "seed_demo").stdout
    assert f"seeded: listings={len(CATALOGUE)}, products=4, demo_items={len(CATALOGUE)}," in seeded
    listed = manage(with_demo, "demo_market", "list").stdout.splitlines()
    assert len(listed) == len(CATALOGUE)
    schedules = manage(
        with_demo,
        "shell",
        "--no-imports",
        "-c",
        "from django_q.models import Schedule; "
        "print(sorted(Schedule.objects.values_list('name', 'func')))",
    ).stdout
    assert "('demo-tick', 'demo.tasks.demo_tick')" in schedules
