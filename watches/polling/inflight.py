"""Re-checks in flight, across processes: each request unit asked once by the fleet.

Dispatchers side by side claim disjoint rows, but the rows of one product's offers or one
shop's feed fall into each one's batch alike. Each found no fresh answer and asked the same
page: four processes on one application id spent four times the requests, one a second,
and drained slower than one (bench/bench_dispatchers.py). So before it asks, a re-check
marks each unit it is about to ask (`feeds.listing_units`: a product's offers, a shop's
feed, a listing) in the cache every worker process shares (`locks`: Redis for a fleet, a
file cache on one host). A unit another process has marked is not asked again: once this
process has asked its own, it waits for those marks to go and reuses the observations they
left, within its own freshness bound (`watches.services.refetch_or_reuse`). A process never
waits while it holds marks, so two never wait on each other.

A mark lives as long as an answer stays fresh enough to reuse: a process that died holding
one (or is still waiting for the marketplace) is waited for that long at most; whatever is
still not fresh then is asked as usual — a duplicate request at worst, never a lost one.
The marks only save requests: a cache that cannot be reached (Redis down, a full disk) marks
nothing, and the re-check asks as it would alone.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from django.core.cache import caches

log = logging.getLogger("watches.polling.inflight")

T = TypeVar("T")

CACHE = "locks"
PREFIX = "asking:"
# How often a waiting process looks whether the marks it waits on are gone: a cache read
# of the few units of one batch, against the second a request of the id takes.
POLL_SECONDS = 0.1


def key(unit: tuple[Hashable, ...]) -> str:
    return PREFIX + ":".join(str(part) for part in unit)


@dataclass
class Marks:
    """The units this call marked (`mine`: it asks them) and those another process had
    (`theirs`: it waits for them), under the holder token only this call knows."""

    holder: str
    mine: set[tuple[Hashable, ...]] = field(default_factory=set)
    theirs: set[tuple[Hashable, ...]] = field(default_factory=set)

    def release(self) -> None:
        """Take this call's marks away, leaving any another process took since ours
        expired."""
        cache = caches[CACHE]
        try:
            ours = [
                name
                for name, holder in cache.get_many([key(unit) for unit in self.mine]).items()
                if holder == self.holder
            ]
            cache.delete_many(ours)
        except Exception:  # they expire by themselves
            log.warning("re-check marks could not be released", exc_info=True)
        self.mine.clear()


def mark(units: Iterable[tuple[Hashable, ...]], seconds: float) -> Marks:
    """Mark each of `units` for `seconds` (at least one) unless another process has:
    `Marks.mine` are this call's to ask, `Marks.theirs` to wait for. Where the cache fails,
    the units left are this call's, unmarked."""
    cache = caches[CACHE]
    marks = Marks(holder=uuid.uuid4().hex)
    timeout = max(1, math.ceil(seconds))
    ordered = sorted(set(units), key=key)
    done = 0
    try:
        for unit in ordered:
            added = cache.add(key(unit), marks.holder, timeout=timeout)
            (marks.mine if added else marks.theirs).add(unit)
            done += 1
    except Exception:
        log.warning("re-checks could not be marked: asked unmarked", exc_info=True)
        marks.mine.update(ordered[done:])
    return marks


def wait_for(
    units: Collection[tuple[Hashable, ...]],
    seconds: float,
    *,
    clock: Callable[[], float] | None = None,
    pause: Callable[[float], None] | None = None,
) -> None:
    """Wait until no process marks any of `units`, or `seconds` have passed on `clock`
    (monotonic). A cache that cannot be read ends the wait: what is not fresh is asked."""
    cache = caches[CACHE]
    clock = clock or time.monotonic
    pause = pause or time.sleep
    until = clock() + seconds
    waiting = [key(unit) for unit in units]
    while waiting and clock() < until:
        try:
            waiting = list(cache.get_many(waiting))
        except Exception:
            log.warning("re-check marks could not be read: not waiting", exc_info=True)
            return
        if waiting:
            pause(min(POLL_SECONDS, max(0.0, until - clock())))


def ask_once(
    items: Sequence[T],
    unit_of: Callable[[T], tuple[Hashable, ...]],
    take_fresh: Callable[[list[T]], list[T]],
    ask: Callable[[list[T]], None],
    seconds: float,
    started: float,
) -> None:
    """The re-check's step for `items` not fresh when read (listings, or products by
    marketplace): mark their units; of those marked here, take what another process answered
    since the read (`take_fresh` keeps those answers and returns the rest) and `ask` the
    rest, keeping the answers before the marks go; then wait for the units others marked —
    for what is left of `seconds` since `started` (monotonic), this call's own answers must
    stay fresh too — take what they answered, and ask the rest."""
    marks = mark([unit_of(item) for item in items], seconds)
    try:
        ask(take_fresh([item for item in items if unit_of(item) in marks.mine]))
    finally:
        marks.release()
    theirs = [item for item in items if unit_of(item) in marks.theirs]
    if theirs:
        wait_for(marks.theirs, seconds - (time.monotonic() - started))
        ask(take_fresh(theirs))
