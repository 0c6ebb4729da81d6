"""Django's file-based cache, counting its files less often: the `pages` cache where there is
no Redis (`make run`, a single host)."""

from __future__ import annotations

import itertools

from django.core.cache.backends.filebased import FileBasedCache

# Django counts the files (a listing of the whole directory) on every write, to cull at
# MAX_ENTRIES: with a few thousand pages kept, that listing cost more than rendering the
# page being written. Counting once every CULL_EVERY writes of a process lets the cache
# outgrow MAX_ENTRIES by at most that many files per process before it is culled.
CULL_EVERY = 100

_writes = itertools.count(1)


class FileCache(FileBasedCache):
    def _cull(self) -> None:
        if next(_writes) % CULL_EVERY == 0:
            super()._cull()
