"""A client-side rate limiter, shared by every caller of one API key in this process.

Price polling and the dispatcher both call a marketplace; the marketplace counts requests per
application id, not per caller, so they must queue on one limiter. Each caller reserves the
next free slot under a lock and sleeps outside it: callers never sleep holding the lock, and
no two of them get the same slot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """At most `rate` requests per second, evenly spaced (a token bucket of depth one)."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_at: float | None = None  # when the next request may start

    def acquire(self, max_wait: float | None = None) -> float | None:
        """Wait for this caller's slot and return how long it waited; None, without waiting
        or taking a slot, when the wait would be longer than `max_wait` seconds."""
        with self._lock:
            now = self._clock()
            start = now if self._next_at is None else max(now, self._next_at)
            wait = start - now
            if max_wait is not None and wait > max_wait:
                return None
            self._next_at = start + self.interval
        if wait > 0:
            self._sleep(wait)
        return wait

    def hold_off(self, seconds: float) -> None:
        """The server asked us to wait (429 with Retry-After): no slot before then."""
        with self._lock:
            until = self._clock() + seconds
            if self._next_at is None or until > self._next_at:
                self._next_at = until

    def wait_needed(self) -> float:
        """How long a caller asking now would wait."""
        with self._lock:
            if self._next_at is None:
                return 0.0
            return max(0.0, self._next_at - self._clock())


_registry: dict[tuple[str, float], RateLimiter] = {}
_registry_lock = threading.Lock()


def shared_limiter(key: str, rate: float) -> RateLimiter:
    """The process-wide limiter for `key` (e.g. one application id) at `rate` requests/s."""
    with _registry_lock:
        limiter = _registry.get((key, rate))
        if limiter is None:
            limiter = _registry[(key, rate)] = RateLimiter(rate)
        return limiter


def install_limiter(key: str, rate: float, limiter: RateLimiter) -> None:
    """Use `limiter` for `key` from now on (tests give it a fake clock)."""
    with _registry_lock:
        _registry[(key, rate)] = limiter


def forget_limiter(key: str, rate: float) -> None:
    with _registry_lock:
        _registry.pop((key, rate), None)
