"""The `locks` cache of one host without Redis: Django's file cache, with an `add` that holds.

The processes of a host (the cluster's workers, the web server, an operator's
`dispatch_outbox`) take their run guards and re-check marks with `cache.add`: the one that
adds a key holds it (`watches.tasks.poll`, `watches.polling.inflight`). Django's file cache
reads whether the key exists, then writes it: two processes that add one key at the same
moment both read "absent" and both believe they hold it (two dispatchers asked one product's
page twice). And a read that finds an entry expired deletes its file by name: a process that
added the key anew in that instant would lose what it holds. So `add`, `get`, `has_key` and
`delete` run under an exclusive `flock` on a file beside the entries: one process of the host
at a time. A `set` needs no lock: the file cache replaces an entry with a rename.

Only the backend's public interface is used (decision 0081): the lock file is named from
the location this class is given, and the file cache lists, counts and clears only its
`.djcache` files, never this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.filebased import FileBasedCache

LOCK_FILE = "add.lock"


class HostLockCache(FileBasedCache):
    def __init__(self, dir: str, params: dict[str, Any]) -> None:
        super().__init__(dir, params)
        self.lock_path = os.path.join(os.path.abspath(dir), LOCK_FILE)
        # `add` reads through `has_key`: the lock is taken once per call, not again inside.
        self._held = threading.local()

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        if getattr(self._held, "lock", False):
            yield
            return
        # The folder may have been removed since start-up, as the file cache allows.
        os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            self._held.lock = True
            try:
                yield
            finally:
                self._held.lock = False

    def add(
        self,
        key: Any,
        value: Any,
        timeout: Any = DEFAULT_TIMEOUT,
        version: int | None = None,
    ) -> bool:
        with self._exclusive():
            return super().add(key, value, timeout, version)

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        with self._exclusive():
            return super().get(key, default, version)

    def has_key(self, key: Any, version: int | None = None) -> bool:
        with self._exclusive():
            return super().has_key(key, version)

    def delete(self, key: Any, version: int | None = None) -> bool:
        with self._exclusive():
            return super().delete(key, version)
