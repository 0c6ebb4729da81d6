"""Run in a child process by tests/watches/test_fleet_ratelimit.py and test_host_ratelimit.py:
one process of the fleet (or of one host) taking slots from the shared budget. Imports nothing
of Django: the limiters need only Redis, or a file."""

from __future__ import annotations

import redis

from watches.marketplaces.ratelimit import RedisRateLimiter


def take_slots(
    url: str, key: str, rate: float, now: float, count: int, start
) -> list[float | None]:
    """`count` slots at the fake time `now` (which never moves: every process asks "at the
    same time"); the waits each was given."""
    limiter = RedisRateLimiter(
        redis.Redis.from_url(url), key, rate, clock=lambda: now, sleep=lambda _: None
    )
    start.wait()
    return [limiter.acquire() for _ in range(count)]


def take_host_slots(path: str, rate: float, now: float, count: int, start) -> list[float | None]:
    """The same from one host's budget without Redis (a file every process shares)."""
    from pathlib import Path

    from watches.marketplaces.hostlimit import HostRateLimiter

    limiter = HostRateLimiter(Path(path), rate, clock=lambda: now, sleep=lambda _: None)
    start.wait()
    return [limiter.acquire() for _ in range(count)]
