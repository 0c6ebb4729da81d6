"""Settings of the pages benchmark's server: production settings, plus a URLconf that adds a
minimal view beside the real pages (bench only; never in yasugoro.urls)."""

import os

from yasugoro.settings import *  # noqa: F403

ROOT_URLCONF = "bench.pages_urls"

# On Redis, each run's keys under a prefix of its own (`BENCH_CACHE_PREFIX`, set by the bench),
# which it deletes at the end: no world reads another's pages, nothing is left behind.
if REDIS_URL:  # noqa: F405
    for _cache in CACHES.values():  # noqa: F405
        _cache["KEY_PREFIX"] = (
            f"{os.environ.get('BENCH_CACHE_PREFIX', 'bench')}-{_cache['KEY_PREFIX']}"
        )
