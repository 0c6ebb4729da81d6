"""Settings of the processes of one host without Redis (tests/watches/test_host_processes.py):
the test settings, with the marketplace budget read from the environment and the `locks`
cache on files, as `make run` has them (the test settings pin Rakuten at 1,000 requests/s so
that no other test waits for a slot, and keep every cache in the process)."""

from yasugoro.env import env_float
from yasugoro.settings_test import *  # noqa: F403
from yasugoro.settings_test import CACHES, VAR_DIR

RAKUTEN_RATE_PER_SECOND = env_float("RAKUTEN_RATE_PER_SECOND", 1.0, minimum=0.01)
CACHES = {
    **CACHES,
    "locks": {
        "BACKEND": "yasugoro.hostcache.HostLockCache",
        "LOCATION": str(VAR_DIR / "cache" / "locks"),
        "OPTIONS": {"MAX_ENTRIES": 1_000_000},
    },
}
