"""The `locks` cache of one host without Redis (`yasugoro.hostcache`): a key added by
several processes at the same moment is held by exactly one of them."""

from __future__ import annotations

import ast
import fcntl
import multiprocessing
import threading
from pathlib import Path

from tests.test_site_url import settings_in_a_fresh_process
from yasugoro.hostcache import HostLockCache

PROCESSES = 4
KEYS = 300


def add_all(location: str, start, found) -> None:
    cache = HostLockCache(location, {"OPTIONS": {"MAX_ENTRIES": 1_000_000}})
    start.wait(timeout=30)
    found.put([name for name in (f"k{n}" for n in range(KEYS)) if cache.add(name, "held", 60)])


def test_a_key_added_by_several_processes_at_once_is_held_by_one(tmp_path: Path):
    # Forked processes, released by one barrier, race on each key in the same order.
    context = multiprocessing.get_context("fork")
    start, found = context.Barrier(PROCESSES), context.Queue()
    procs = [
        context.Process(target=add_all, args=(str(tmp_path), start, found))
        for _ in range(PROCESSES)
    ]
    for proc in procs:
        proc.start()
    held = [found.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0

    every = [name for names in held for name in names]
    assert sorted(every) == sorted(f"k{n}" for n in range(KEYS)), "each key held once"


def test_add_holds_a_key_until_it_expires_or_is_deleted(tmp_path: Path):
    cache = HostLockCache(str(tmp_path), {})
    assert cache.add("guard", "mine", 60)
    assert not cache.add("guard", "theirs", 60)
    assert cache.get("guard") == "mine"
    cache.delete("guard")
    assert cache.add("guard", "theirs", 60)
    cache.set("gone", "expired", -1)  # already expired
    assert cache.add("gone", "mine", 60)


def test_the_lock_file_is_no_cache_entry(tmp_path: Path):
    cache = HostLockCache(str(tmp_path), {})
    cache.add("guard", "mine", 60)
    cache.clear()
    assert (tmp_path / "add.lock").exists(), "left in place by clear"
    assert cache.add("guard", "mine", 60), "and the entries cleared"


def test_add_recreates_a_removed_folder(tmp_path: Path):
    cache = HostLockCache(str(tmp_path / "locks"), {})
    (tmp_path / "locks").rmdir()
    assert cache.add("guard", "mine", 60)


def test_without_redis_the_hosts_processes_share_this_locks_cache(tmp_path: Path):
    # The settings `make run` starts with, in a process of their own.
    printed = settings_in_a_fresh_process(tmp_path, "settings.CACHES['locks']", REDIS_URL="")
    locks = ast.literal_eval(printed)
    assert locks["BACKEND"] == "yasugoro.hostcache.HostLockCache"
    assert locks["LOCATION"] == str(tmp_path / "cache" / "locks")


def test_reads_wait_for_an_add_in_progress(tmp_path: Path):
    # A read that finds an entry expired deletes its file: under the lock, it cannot delete
    # what another process is adding at that moment.
    cache = HostLockCache(str(tmp_path), {})
    cache.set("guard", "expired", -1)
    seen: list[object] = []
    readers = [
        threading.Thread(target=lambda: seen.append(cache.get("guard"))),
        threading.Thread(target=lambda: seen.append(cache.has_key("guard"))),
    ]
    with open(tmp_path / "add.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process, adding the key anew
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=0.5)
        assert seen == [], "each read waits for the lock"
        HostLockCache(str(tmp_path), {}).set("guard", "theirs", 60)
    for reader in readers:
        reader.join(timeout=30)
    assert sorted(seen, key=str) == [True, "theirs"]
    assert cache.get("guard") == "theirs", "and nothing deleted it"
