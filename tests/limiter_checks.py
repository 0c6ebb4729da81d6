"""What a budget shared by several processes must keep whatever its store (Redis for the
fleet, a file for one host): requests that wake late for their slots and then take a while
to arrive never arrive two in one wall-clock second."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable

from tests.fakes.clock import FakeClock
from watches.marketplaces.ratelimit import Limiter


def arrivals_per_second(
    make: Callable[[FakeClock, Callable[[float], None]], Limiter],
) -> Counter[int]:
    """Three processes share one id at 1/s (`make(clock, sleep)` is one of them); each
    request wakes up to 0.3 s after its slot and then takes up to 0.25 s to arrive, at random,
    and now and then they all idle a while: how many of 300 requests arrive in each second.
    (Slots one second apart at arbitrary moments would put two in one: one due at 100.9 s
    arriving at 101.05 s shares second 101 with the next, due at 101.9 s.)"""
    rng = random.Random(12)
    clock = FakeClock()
    clock.now = 100.9

    def oversleep(seconds: float) -> None:
        clock.sleep(seconds + rng.uniform(0, 0.3))

    processes = [make(clock, oversleep) for _ in range(3)]
    arrivals = []
    for _ in range(300):
        if rng.random() < 0.2:
            clock.now += rng.uniform(0, 2)
        if rng.choice(processes).acquire() is not None:
            arrivals.append(clock.now + rng.uniform(0, 0.25))
    return Counter(math.floor(at) for at in arrivals)
