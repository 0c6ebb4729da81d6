"""Django's file-based cache, counting its files less often: the `pages` cache where there is
no Redis (`make run`, a single host)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from hashlib import md5
from typing import Any

from django.core.cache.backends.filebased import FileBasedCache

# Django counts the files (a listing of the whole directory) on every write, to cull at
# MAX_ENTRIES: with a few thousand pages kept, that listing cost more than rendering the
# page being written. Counting once every CULL_EVERY writes of a process lets the cache
# outgrow MAX_ENTRIES by at most that many files per process before it is culled.
CULL_EVERY = 100

_writes = itertools.count(1)
# From how many keys `delete_many` lists the folder rather than trying each file.
_LIST_FROM = 20
# How many keys' file names `delete_many` remembers before it forgets them all (a key's name
# never changes: the hash of the prefixed, versioned key): the same listings' versions are
# forgotten cycle after cycle, and hashing each again was 3 % of what 2,000 listings add to a
# dispatch cycle (counted in instructions, docs/decisions.md). About 270 bytes a name: some
# 14 MB at most in a worker, plus one call's keys.
_NAMES_KEPT = 50_000


class FileCache(FileBasedCache):
    def __init__(self, dir: str, params: dict[str, Any]) -> None:
        super().__init__(dir, params)
        # (key, version) -> its file's name, for `delete_many`.
        self._names: dict[tuple[Any, int | None], str] = {}

    def _cull(self) -> None:
        if next(_writes) % CULL_EVERY == 0:
            super()._cull()

    def delete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        # Django deletes key by key, a stat() of each file first: forgetting the versions of
        # the 2,000 listings a dispatch cycle re-fetched — few of which have a cached page —
        # cost more than writing the listings back. One listing of the directory tells which
        # files are there; only those are removed. A few keys (a staff edit, a pause) are
        # cheaper deleted one by one than the listing of a folder of up to MAX_ENTRIES files.
        keys = list(keys)
        if len(keys) < _LIST_FROM:
            super().delete_many(keys, version)
            return
        try:
            present = set(os.listdir(self._dir))
        except FileNotFoundError:
            return
        names = self._names
        if len(names) > _NAMES_KEPT:
            names.clear()
        for key in keys:
            # Only a string's name is remembered: True and 1 are one key of a dict but two
            # names of files. (The pages' keys are all strings.)
            remembered = type(key) is str
            name = names.get((key, version)) if remembered else None
            if name is None:
                name = self._file_name(key, version)
                if remembered:
                    names[key, version] = name
            if name in present:
                self._delete(os.path.join(self._dir, name))

    def _file_name(self, key: Any, version: int | None) -> str:
        # `_key_to_file`'s name without its validation of the key, which only warns (a key
        # that does not pass is written under the same name) and cost as much as the rest.
        name = md5(self.make_key(key, version).encode(), usedforsecurity=False).hexdigest()
        return name + self.cache_suffix
