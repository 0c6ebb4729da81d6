"""Client-side rate limiters: one budget per (marketplace, application id).

A marketplace counts requests per application id, not per caller, so every caller of one id —
price polling and the dispatcher, in every process on every host — must take its requests
from one budget. `limiter_for(marketplace, app_id, rate)` is that budget:

- with `REDIS_URL` set, a `RedisRateLimiter`: the budget lives in Redis, shared by the whole
  fleet, and a 429 lowers the fleet's rate for a while (AIMD: multiplicative decrease on a
  429, additive increase back to the configured rate);
- without Redis, the host's budget (`watches.marketplaces.hostlimit.HostRateLimiter`): a
  small file under VAR_DIR every process of the host reserves its slots in — a single host
  is the whole fleet.

`RateLimiter` keeps a budget in one process's memory, on a clock a test or a simulation
gives it.

Both reserve slots: a caller asks for the next free slot, gets it (and how long to wait for
it) atomically, and sleeps outside any lock. No two callers get the same slot and no caller
polls. `Budget` adds up several application ids of one marketplace: each request takes the
id whose slot comes soonest.

What the fleet's budget promises is what the marketplace counts: at most `rate` requests of an
id arriving in any one wall-clock second (for a whole rate, or one request every 1/rate
seconds), whatever the time each request takes from its slot to the marketplace. Slots
evenly spaced at arbitrary moments would not keep it: a request due at 0.99 s that arrives at
1.02 s shares second 1 with the next one, due and sent at 1.99 s. So the Redis limiter puts
its slots on the configured rate's grid, in the middle of each interval (k + 0.5 s at 1/s,
never a burst: a slot per interval at most), and a caller that wakes more than a quarter of
an interval after its slot (`late_limit`) gives it up and takes the next: a request then
has another quarter interval to arrive before it could reach the next interval's second.
An idle budget's first request waits for the next grid point (half an interval on average).
Above 5 requests/s the late limit stays at 50 ms, so a request there may cross into the next
second: at such rates the promise is per interval on average, not per second.

Why a small Lua script rather than the `limits` library (decision 0025): `limits` answers
"may I, now?" — a refused caller has to ask again and again — while a reservation answers "your
slot is in 0.7 s" in one round trip; `limits`' Redis windows are stamped with each client's
`time.time()`, ours with the Redis server's clock (one clock for the fleet) unless a test
gives its own; and AIMD needs the current rate read, lowered and used in the same atomic step
as the reservation, which `limits`' fixed rate items cannot express.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# How late a caller may wake for its slot: the same for the host's budget and the fleet's.
from watches.marketplaces.hostlimit import (
    LATE_FLOOR_SECONDS,
    LATE_FRACTION,
    HostRateLimiter,
    budget_path,
    on_time,
)

log = logging.getLogger("watches.marketplaces.ratelimit")


class LimiterUnavailable(Exception):
    """The shared budget cannot be reached (Redis down): no request may be made."""


class Limiter(Protocol):
    def acquire(self, max_wait: float | None = None) -> float | None:
        """Wait for this caller's slot and return how long it waited; None, without waiting
        or taking a slot, when the wait would be longer than `max_wait` seconds."""
        ...

    def hold_off(self, seconds: float) -> None:
        """The server said "too many requests" and to wait `seconds`."""
        ...

    def wait_needed(self) -> float:
        """How long a caller asking now would wait."""
        ...

    def current_rate(self) -> float:
        """Requests per second this budget gives right now."""
        ...


class RateLimiter:
    """At most `rate` requests per second in this process, evenly spaced (a token bucket of
    depth one)."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_at: float | None = None  # when the next request may start

    def acquire(self, max_wait: float | None = None) -> float | None:
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
        """No slot before `seconds` from now."""
        with self._lock:
            until = self._clock() + seconds
            if self._next_at is None or until > self._next_at:
                self._next_at = until

    def wait_needed(self) -> float:
        with self._lock:
            if self._next_at is None:
                return 0.0
            return max(0.0, self._next_at - self._clock())

    def current_rate(self) -> float:
        return self.rate


# AIMD, for the fleet's shared budget: a 429 halves the rate (never below a tenth of the
# configured one, and once per episode: the requests already in flight answer 429 together),
# then it climbs back by a tenth of the configured rate every 30 s (from half: 2.5 minutes).
DECREASE_FACTOR = 0.5
FLOOR_FACTOR = 0.1
INCREASE_PER_SECOND = 0.1 / 30  # of the configured rate
CUT_GAP_SECONDS = 2.0
_IDLE_EXPIRY = 86400  # state of an id nobody used for a day is forgotten

# KEYS[1]: the budget's state (hash: tat, lead, rate, rate_at, cut_at); KEYS[2]: the prefix of
# its per-minute usage counters. ARGV: operation, now ('' = the Redis server's clock), the
# configured rate, then max_wait ('' = none) for `acquire` or seconds for `hold_off`.
# Numbers go back as strings: Redis would truncate a Lua number to an integer.
# `tat`: no slot before it. `acquire` writes it as the grid's boundary half an interval before
# the next free slot, never near a slot: a moment close to one could be read back as the slot
# just given (a time rounded to the microsecond was, at 3/s). `lead`: how much of an interval
# the next slot was moved on by the grid beyond 1/rate, owed back to the spacing after it, so
# that below the configured rate (AIMD) slots still come `rate` a second on average.
_SCRIPT = """
local op = ARGV[1]
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local base = tonumber(ARGV[3])
local floor_rate = base * tonumber(ARGV[6])
local s = redis.call('HMGET', KEYS[1], 'tat', 'rate', 'rate_at', 'cut_at', 'lead')
local tat = tonumber(s[1]) or now
local rate = tonumber(s[2]) or base
local rate_at = tonumber(s[3]) or now
local cut_at = tonumber(s[4])
local lead = tonumber(s[5]) or 0
if now > rate_at then
  rate = rate + base * tonumber(ARGV[7]) * (now - rate_at)
end
rate = math.max(floor_rate, math.min(base, rate))
-- Slots fall on the configured rate's grid, mid-interval: slot k at (k + 0.5) / base (k + 0.5 s
-- at 1/s). The first slot at or after a moment, within a microsecond's tolerance:
local function first_slot(t)
  return math.ceil(t * base - 0.5 - 1e-6)
end
local function n(x)
  return string.format('%.17g', x)
end
if op == 'peek' then
  local wait = math.max(0, (first_slot(math.max(tat, now)) + 0.5) / base - now)
  return {string.format('%.6f', wait), string.format('%.6f', rate)}
end
if op == 'acquire' then
  local k = first_slot(math.max(tat, now))
  local slot = (k + 0.5) / base
  -- The tolerance may put the slot up to a microsecond before now: that slot is now (a
  -- negative wait is the refusal below, and this slot is taken).
  local wait = math.max(0, slot - now)
  local max_wait = tonumber(ARGV[4])
  if max_wait and wait > max_wait then
    return {'-1', string.format('%.6f', rate)}
  end
  if now > tat then lead = 0 end  -- idle: nothing owed
  -- The next slot: 1/rate after this one, rounded up to the grid, a whole slot at least.
  local spacing = base / rate - lead
  local step = math.max(1, math.ceil(spacing - 1e-9))
  lead = math.max(0, step - spacing)
  local used = KEYS[2] .. ':' .. math.floor(slot / 60)
  redis.call('INCR', used)
  redis.call('EXPIRE', used, 600)
  redis.call('HSET', KEYS[1], 'tat', n((k + step) / base), 'lead', n(lead),
    'rate', n(rate), 'rate_at', n(now))
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[8]))
  return {string.format('%.6f', wait), string.format('%.6f', rate)}
end
if op == 'hold_off' then
  local hold_until = now + tonumber(ARGV[4])
  if hold_until > tat then
    tat = hold_until
    lead = 0
  end
  if not cut_at or now - cut_at >= tonumber(ARGV[5]) then
    rate = math.max(floor_rate, rate * tonumber(ARGV[9]))
    cut_at = now
  end
  redis.call('HSET', KEYS[1], 'tat', n(tat), 'lead', n(lead), 'rate', n(rate),
    'rate_at', n(now), 'cut_at', n(cut_at))
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[8]))
  return {string.format('%.6f', math.max(0, tat - now)), string.format('%.6f', rate)}
end
return redis.error_reply('unknown operation ' .. tostring(op))
"""


class RedisRateLimiter:
    """The fleet's budget of one application id, in Redis: at most `rate` requests per second
    across every process that uses the same `key`, evenly spaced, lowered by a 429 (AIMD).

    `clock` None uses the Redis server's clock (one clock for every host); tests give a fake
    one. `sleep` is how a caller waits for its slot; how late it woke is measured on `clock`
    when given, else on this process's monotonic clock."""

    def __init__(
        self,
        client: Any,
        key: str,
        rate: float,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.key = key
        self.rate = rate
        self._client = client
        self._script = client.register_script(_SCRIPT)
        self._clock = clock
        self._sleep = sleep
        self._elapsed = time.monotonic if clock is None else clock
        self.late_limit = max(LATE_FLOOR_SECONDS, LATE_FRACTION / rate)

    def _run(self, op: str, extra: str = "") -> tuple[float, float]:
        import redis

        now = "" if self._clock is None else repr(self._clock())
        args = [
            op,
            now,
            repr(self.rate),
            extra,
            repr(CUT_GAP_SECONDS),
            repr(FLOOR_FACTOR),
            repr(INCREASE_PER_SECOND),
            str(_IDLE_EXPIRY),
            repr(DECREASE_FACTOR),
        ]
        try:
            first, rate = self._script(keys=[self.key, f"{self.key}:used"], args=args)
        except redis.RedisError as exc:
            raise LimiterUnavailable(f"rate limiter unavailable: {type(exc).__name__}") from exc
        return float(first), float(rate)

    def acquire(self, max_wait: float | None = None) -> float | None:
        """As `Limiter.acquire`; a slot this caller woke too late for is given up (it stays
        unused) and the next one taken, at most LATE_TRIES times before giving up (None)."""
        limit = "" if max_wait is None else repr(max_wait)

        def reserve() -> float | None:
            wait, _ = self._run("acquire", limit)
            return None if wait < 0 else wait

        return on_time(reserve, self._elapsed, self._sleep, self.late_limit, self.key)

    def hold_off(self, seconds: float) -> None:
        """No slot for anyone before `seconds` from now, and the fleet's rate lowered."""
        self._run("hold_off", repr(max(0.0, seconds)))

    def wait_needed(self) -> float:
        return self._run("peek")[0]

    def current_rate(self) -> float:
        return self._run("peek")[1]

    def used(self, minute: int) -> int:
        """Slots taken in minute number `minute` (seconds since the epoch // 60)."""
        import redis

        try:
            return int(self._client.get(f"{self.key}:used:{minute}") or 0)
        except redis.RedisError as exc:
            raise LimiterUnavailable(f"rate limiter unavailable: {type(exc).__name__}") from exc


@dataclass(frozen=True)
class Slot:
    app_id: str
    waited: float


class Budget:
    """Several application ids of one marketplace: their allowances add up. Each request
    takes the id whose slot comes soonest."""

    def __init__(self, limiters: Mapping[str, Limiter]) -> None:
        if not limiters:
            raise ValueError("a budget needs at least one application id")
        self.limiters = dict(limiters)

    def acquire(self, max_wait: float | None = None, only: str | None = None) -> Slot | None:
        """A slot on the soonest id (on `only`, when it is one of them), waited for; None (no
        slot taken) when it is further away than `max_wait`. Another caller may take the
        soonest slot between the look and the reservation: this caller then waits for the
        next one, never less."""
        if only in self.limiters:
            app_id = only
        elif len(self.limiters) == 1:
            (app_id,) = self.limiters  # nothing to choose: no look first (a Redis round trip)
        else:
            app_id = min(self.limiters, key=lambda key: self.limiters[key].wait_needed())
        waited = self.limiters[app_id].acquire(max_wait=max_wait)
        return None if waited is None else Slot(app_id, waited)

    def hold_off(self, app_id: str, seconds: float) -> None:
        self.limiters[app_id].hold_off(seconds)

    def wait_needed(self) -> float:
        return min(limiter.wait_needed() for limiter in self.limiters.values())

    def current_rate(self) -> float:
        return sum(limiter.current_rate() for limiter in self.limiters.values())


_registry: dict[tuple[str, float], Limiter] = {}
_registry_lock = threading.Lock()
_clients: dict[str, Any] = {}


def shared_limiter(key: str, rate: float) -> Limiter:
    """The host-wide limiter for `key` (e.g. `rakuten:<app id>`) at `rate` requests/s, one
    instance per process."""
    from django.conf import settings

    with _registry_lock:
        limiter = _registry.get((key, rate))
        if limiter is None:
            limiter = _registry[(key, rate)] = HostRateLimiter(
                budget_path(settings.VAR_DIR, key), rate
            )
        return limiter


def limiter_for(marketplace: str, app_id: str, rate: float) -> Limiter:
    """The budget of one application id of `marketplace` at `rate` requests/s: the fleet's in
    Redis when `REDIS_URL` is set, else this host's."""
    from django.conf import settings

    key = f"{marketplace}:{app_id}"
    with _registry_lock:
        limiter = _registry.get((key, rate))
        if limiter is None and settings.REDIS_URL:
            limiter = _registry[(key, rate)] = RedisRateLimiter(
                _redis(settings.REDIS_URL), redis_key(marketplace, app_id), rate
            )
    return limiter or shared_limiter(key, rate)


def redis_key(marketplace: str, app_id: str, prefix: str = "yasugoro:ratelimit") -> str:
    """The Redis key of an id's budget: the id itself is a credential and stays out of Redis,
    as it stays out of metrics (the first 8 hex digits of its SHA-256)."""
    return f"{prefix}:{marketplace}:{app_id_label(app_id)}"


def app_id_label(app_id: str) -> str:
    return hashlib.sha256(app_id.encode()).hexdigest()[:8]


def _redis(url: str) -> Any:
    import redis

    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=2
        )
    return client


def install_limiter(key: str, rate: float, limiter: Limiter) -> None:
    """Use `limiter` for `key` from now on (tests give it a fake clock)."""
    with _registry_lock:
        _registry[(key, rate)] = limiter


def forget_limiter(key: str, rate: float) -> None:
    """Drop `key`'s limiter and the host's record of its slots and hold-offs (tests: a 429
    in one must not hold off the next)."""
    from django.conf import settings

    with _registry_lock:
        _registry.pop((key, rate), None)
        HostRateLimiter(budget_path(settings.VAR_DIR, key), rate).reset()
