"""SQLite's connection settings, as a fresh process on the production settings opens its
connection: the write-ahead log, and a page cache and memory map sized by the environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.test_demo_app import environment
from tests.test_demo_app import run as run_python

PROBE = """
import json, django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    seen = {}
    for pragma in ("journal_mode", "synchronous", "cache_size", "mmap_size"):
        cursor.execute(f"PRAGMA {pragma}")
        seen[pragma] = cursor.fetchone()[0]
print(json.dumps(seen))
"""


def pragmas(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    return run_python(environment(tmp_path, **variables), "-c", PROBE)


def test_a_connection_gets_the_log_the_cache_and_the_map_by_default(tmp_path):
    result = pragmas(tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "journal_mode": "wal",
        "synchronous": 1,  # NORMAL
        "cache_size": -16384,  # KiB when negative: 16 MiB, not SQLite's 2 MiB
        "mmap_size": 1024 * 1024 * 1024,
    }


def test_the_cache_and_the_map_follow_the_environment(tmp_path):
    result = pragmas(tmp_path, SQLITE_CACHE_KB="4096", SQLITE_MMAP_MB="0")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert (seen["cache_size"], seen["mmap_size"]) == (-4096, 0)


def test_a_negative_map_size_stops_start_up_with_one_clear_error(tmp_path):
    result = pragmas(tmp_path, SQLITE_MMAP_MB="-1")
    assert result.returncode != 0
    assert "SQLITE_MMAP_MB must be at least 0, got -1" in result.stderr
