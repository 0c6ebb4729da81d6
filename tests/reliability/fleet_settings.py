"""Settings of the fleet test's qcluster processes (tests/reliability/test_fleet.py): the test
settings, with the marketplace budget read from the environment as production reads it (the
test settings pin Rakuten at 1,000 requests/s so that no other test waits for a slot)."""

from yasugoro.env import env_float
from yasugoro.settings_test import *  # noqa: F403

RAKUTEN_RATE_PER_SECOND = env_float("RAKUTEN_RATE_PER_SECOND", 1.0, minimum=0.01)
