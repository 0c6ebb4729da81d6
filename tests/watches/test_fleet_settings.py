"""The fleet budget's settings, as a fresh process reads them from the environment: several
application ids, and a refetch share that must leave polling something."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

# A fresh process on the production settings, its environment cleared of the test's own.
from tests.demo.test_demo_app import environment
from tests.demo.test_demo_app import run as run_python

PROBE = """
import json, django
django.setup()
from django.conf import settings
print(json.dumps({
    "ids": settings.RAKUTEN_APP_IDS,
    "id": settings.RAKUTEN_APP_ID,
    "keys": settings.RAKUTEN_ACCESS_KEYS,
    "adapters": sorted(settings.MARKETPLACE_ADAPTERS),
    "share": settings.POLL_REFETCH_SHARE,
}))
"""


def run(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    return run_python(environment(tmp_path, **variables), "-c", PROBE)


def test_several_application_ids_configure_rakuten_without_a_single_one(tmp_path):
    result = run(tmp_path, RAKUTEN_APP_IDS="first-id:pk_first, second-id:pk_second")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["ids"] == ["first-id", "second-id"]
    assert seen["id"] == "first-id"
    assert seen["keys"] == {"first-id": "pk_first", "second-id": "pk_second"}
    assert seen["adapters"] == ["rakuten"]  # production with Rakuten: no demo


def test_one_application_id_is_a_list_of_one(tmp_path):
    result = run(tmp_path, RAKUTEN_APP_ID="only-id", RAKUTEN_ACCESS_KEY="pk_only")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert (seen["ids"], seen["keys"]) == (["only-id"], {"only-id": "pk_only"})


def test_a_refetch_share_of_everything_stops_start_up_with_one_clear_error(tmp_path):
    result = run(tmp_path, POLL_REFETCH_SHARE="1")
    assert result.returncode != 0
    assert "POLL_REFETCH_SHARE must be below 1, got 1.0" in result.stderr


def test_a_negative_refetch_share_stops_start_up(tmp_path):
    result = run(tmp_path, POLL_REFETCH_SHARE="-0.1")
    assert result.returncode != 0
    assert "POLL_REFETCH_SHARE must be at least 0" in result.stderr
