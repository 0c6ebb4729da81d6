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

The file keeps its moments on the host's monotonic clock, which every process of the host
reads alike and no step of the system clock moves; each process puts them on the wall clock's
grid with its own offset to the system clock, read when this module was first imported (a
test that freezes `time.time()` cannot stop the budget's time). Processes started either side
of a clock step then disagree on the grid, never on the spacing of their slots. The file names
the boot it was written in: after a restart of the host, a moment of the last boot's monotonic
clock means nothing, and the budget starts idle. The state is read and written under a lock
file of its own, and replaced whole (a rename), so a process killed while writing leaves the
last state, not an empty one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import tempfile
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
# A next slot further ahead than this cannot be a hold-off the marketplace asked for: the file
# was written on another clock, and is forgotten rather than waited for.
IMPLAUSIBLE_SECONDS = 86400.0
# The system clock's lead on this process's monotonic clock, read once when this module is
# first imported (before any test can freeze `time.time()`).
_WALL_OFFSET = time.time() - time.monotonic()


def _boot_id() -> str:
    """This boot of the host (Linux), or "" where the system does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


BOOT = _boot_id()


def on_grid(moment: float, rate: float) -> float:
    """The first slot at or after `moment`: the middle of an interval of the rate's grid
    (k + 0.5 s at 1/s), within a microsecond's tolerance."""
    return (math.ceil(moment * rate - 0.5 - 1e-6) + 0.5) / rate


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
            if data and data.get("boot") != BOOT:
                return cls()  # the last boot's monotonic clock: nothing to wait for
            return cls(data.get("next"), {int(m): int(n) for m, n in data.get("used", {}).items()})
        except (ValueError, TypeError, AttributeError):
            log.warning("the budget's file could not be read: taken as idle")
            return cls()

    def write(self) -> str:
        return json.dumps({"boot": BOOT, "next": self.next, "used": self.used}, sort_keys=True)

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
        wall_offset: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`clock`: the clock every process of the host reads alike (monotonic); the wall
        clock is `clock` plus `wall_offset` (this process's offset by default; none for an
        injected clock)."""
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.rate = rate
        self.interval = 1.0 / rate
        self.late_limit = max(LATE_FLOOR_SECONDS, LATE_FRACTION / rate)
        self._host_clock = clock or time.monotonic
        if wall_offset is None:
            wall_offset = _WALL_OFFSET if clock is None else 0.0
        self._offset = wall_offset
        self._sleep = sleep

    def _clock(self) -> float:
        """Seconds since the epoch, on the host's clock."""
        return self._host_clock() + self._offset

    @contextlib.contextmanager
    def _state(self) -> Iterator[_State]:
        """The budget's state, locked against every other caller of the host while the block
        runs, and written back if it changed; its `next` on this process's wall clock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            try:
                text = self.path.read_text(encoding="ascii")
            except FileNotFoundError:
                text = ""
            state = _State.read(text)
            if state.next is not None:
                state.next += self._offset
                if state.next - self._clock() > IMPLAUSIBLE_SECONDS:
                    state.next = None
            yield state
            if state.next is not None:
                state.next -= self._offset
            written = state.write()
            if written != text:
                self._replace(written)

    def _replace(self, text: str) -> None:
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name)
        try:
            with open(fd, "w", encoding="ascii") as file:
                file.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.path.unlink(missing_ok=True)
