"""One application id's budget for every process of one host, without Redis.

`make run` has no Redis, and still several processes ask the marketplaces: the cluster's
workers (a poll in one, a dispatch cycle in another), the web server's add-by-link, an
operator's `dispatch_outbox`. A budget per process would let each of them ask at the id's
whole rate. So the next free slot is kept in a small file under `VAR_DIR/ratelimit/`, read
and moved under an exclusive `flock`: no two callers of any process of the host get one
slot, and a 429's hold-off holds them all. The file also counts the slots taken a minute,
for the admin overview, as Redis does for a fleet.

The slots are the fleet's (`watches.marketplaces.ratelimit`): on the rate's grid of the wall
clock, mid-interval, and a caller that wakes more than a quarter interval after its slot
gives it up and takes the next — so at most `rate` requests of the id arrive in one
wall-clock second, whatever the time each takes to get there. No AIMD: a 429 holds the
host off for what the marketplace said.

The wall clock is this process's monotonic clock plus its offset to the system clock, read
when this module was first imported: a test that freezes `time.time()` cannot stop the
budget's time, and the grid stays on the system's seconds (a step of the system clock moves
this process's grid until it restarts; the cluster recycles its workers).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("watches.marketplaces.hostlimit")

# As the fleet's budget in Redis (`ratelimit`, which reads them from here): a caller this late
# for its slot (a quarter of the interval, at least 50 ms) takes another; after this many
# missed slots in a row it gives up as if held off (the process is too slow to keep the
# budget's promise, so it asks nothing).
LATE_FRACTION = 0.25
LATE_FLOOR_SECONDS = 0.05
LATE_TRIES = 3
# A next slot further ahead than this was written on another clock (the system's stepped
# back): it is forgotten rather than waited for.
IMPLAUSIBLE_SECONDS = 86400.0
# The system clock's lead on this process's monotonic clock, read once when this module is
# first imported (before any test can freeze `time.time()`).
_WALL_OFFSET = time.time() - time.monotonic()


def on_grid(moment: float, rate: float) -> float:
    """The first slot at or after `moment`: the middle of an interval of the rate's grid
    (k + 0.5 s at 1/s), within a microsecond's tolerance."""
    return (math.ceil(moment * rate - 0.5 - 1e-6) + 0.5) / rate


def wall_clock() -> float:
    """Seconds since the epoch, on this process's monotonic clock."""
    return time.monotonic() + _WALL_OFFSET


def budget_path(var_dir: Path, key: str) -> Path:
    """The file of `key`'s budget (`rakuten:<app id>`): the id is a credential and stays out
    of file names (the first 16 hex digits of the key's SHA-256)."""
    marketplace = key.partition(":")[0]
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return var_dir / "ratelimit" / f"{marketplace}-{digest}"


def on_time(
    reserve: Callable[[], float | None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    late_limit: float,
    name: str,
) -> float | None:
    """Reserve a slot (`reserve`: the wait until it, or None: none within the caller's
    limit) and sleep until it; how long that took in all. A caller that wakes more than
    `late_limit` after its slot gives it up and reserves the next, at most LATE_TRIES times
    before it gives up (None): its request could arrive in the next slot's second."""
    waited = 0.0
    for _ in range(LATE_TRIES):
        # Read before the reservation: an upper bound of the lateness, never less.
        asked = clock()
        wait = reserve()
        if wait is None:
            return None
        if wait > 0:
            sleep(wait)
        waited += wait
        late = clock() - asked - wait
        if late <= late_limit:
            return waited
        log.info("%s: woke %.3f s after its slot; taking the next one", name, late)
    return None


@dataclass
class _State:
    """What the budget's file holds: `next`, the moment from which the next slot may fall
    (None: the budget is idle); `used`, the slots taken by minute, the last two minutes'."""

    next: float | None = None
    used: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls, text: str) -> _State:
        try:
            data = json.loads(text) if text.strip() else {}
            return cls(data.get("next"), {int(m): int(n) for m, n in data.get("used", {}).items()})
        except (ValueError, TypeError, AttributeError):
            log.warning("the budget's file could not be read: taken as idle")
            return cls()

    def write(self) -> str:
        return json.dumps({"next": self.next, "used": self.used}, sort_keys=True)

    def count(self, minute: int) -> None:
        self.used = {m: n for m, n in self.used.items() if m >= minute - 1}
        self.used[minute] = self.used.get(minute, 0) + 1


class HostRateLimiter:
    """At most `rate` requests a second of one id from every process of this host sharing
    `path`, on the wall clock's grid."""

    def __init__(
        self,
        path: Path,
        rate: float,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.path = path
        self.rate = rate
        self.interval = 1.0 / rate
        self.late_limit = max(LATE_FLOOR_SECONDS, LATE_FRACTION / rate)
        self._clock = clock or wall_clock
        self._sleep = sleep

    @contextlib.contextmanager
    def _state(self) -> Iterator[_State]:
        """The budget's state, locked against every other caller of the host while the block
        runs, and written back if it changed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="ascii") as file:
            fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
            file.seek(0)
            text = file.read()
            state = _State.read(text)
            if state.next is not None and state.next - self._clock() > IMPLAUSIBLE_SECONDS:
                state.next = None
            yield state
            written = state.write()
            if written != text:
                file.seek(0)
                file.truncate()
                file.write(written)

    def _reserve(self, max_wait: float | None) -> float | None:
        with self._state() as state:
            now = self._clock()
            start = now if state.next is None else max(now, state.next)
            # The tolerance may put the slot a microsecond before now: that slot is now.
            wait = max(0.0, on_grid(start, self.rate) - now)
            if max_wait is not None and wait > max_wait:
                return None
            state.next = now + wait + self.interval
            state.count(int((now + wait) // 60))
        return wait

    def acquire(self, max_wait: float | None = None) -> float | None:
        """As `ratelimit.Limiter.acquire`; a slot this caller woke too late for is given up
        (it stays taken: nobody sends in it) and the next one taken (`on_time`)."""
        return on_time(
            lambda: self._reserve(max_wait),
            self._clock,
            self._sleep,
            self.late_limit,
            self.path.name,
        )

    def hold_off(self, seconds: float) -> None:
        """No slot for any process of the host before `seconds` from now."""
        with self._state() as state:
            until = self._clock() + max(0.0, seconds)
            if state.next is None or until > state.next:
                state.next = until

    def wait_needed(self) -> float:
        with self._state() as state:
            now = self._clock()
            start = now if state.next is None else max(now, state.next)
            return max(0.0, on_grid(start, self.rate) - now)

    def used(self, minute: int) -> int:
        """Slots the host's processes took in minute number `minute` (seconds since the
        epoch // 60): the admin overview's count, kept for the last two minutes."""
        with self._state() as state:
            return state.used.get(minute, 0)

    def current_rate(self) -> float:
        return self.rate

    def reset(self) -> None:
        """Forget every slot taken and every hold-off (a test's budget, between tests)."""
        self.path.unlink(missing_ok=True)
