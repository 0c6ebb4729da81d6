"""The lease a dispatcher holds on the rows it claimed, kept alive while it works.

A claim stamps `claimed_at`; another dispatcher takes a row over once `claimed_at` is older
than OUTBOX_LEASE_SECONDS. So that this never happens under a live dispatcher:

- the heartbeat (`Lease.beat`) moves `claimed_at` of every row the batch still holds to now,
  fenced by holder and attempt number like every other write — once before the deliveries
  start (writing each row's `attempt_started_at`, the intent) and then at least every third
  of the lease while they run;
- the send gate (`Lease.may_start`): a delivery starts only on a row still held and with at
  least one delivery's worth of lease left (connect + read timeout + margin); otherwise the
  row is retried rather than sent by a dispatcher that may be about to lose it;
- the floor (`check_settings`, at start-up): the lease must cover what can happen between
  two beats — the rest of a cycle (OUTBOX_CYCLE_SECONDS: claiming, guards, re-fetching a
  batch) plus one delivery (WEBPUSH_CONNECT_TIMEOUT + WEBPUSH_READ_TIMEOUT) plus MARGIN.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from outbox.clock import Clock
from outbox.transitions import Fence, renew_lease

# Seconds of slack above the arithmetic: database writes, a slow thread start, clock steps.
MARGIN = 5.0


def delivery_budget() -> float:
    """The longest one delivery may take: the channel's connect and read timeouts."""
    return settings.WEBPUSH_CONNECT_TIMEOUT + settings.WEBPUSH_READ_TIMEOUT


def lease_floor() -> float:
    return settings.OUTBOX_CYCLE_SECONDS + delivery_budget() + MARGIN


def check_settings() -> None:
    """Refuse a lease that a live dispatcher could outlive between two heartbeats."""
    floor = lease_floor()
    if floor > settings.OUTBOX_LEASE_SECONDS:
        raise ImproperlyConfigured(
            f"OUTBOX_LEASE_SECONDS={settings.OUTBOX_LEASE_SECONDS} is too short: it must be at "
            f"least OUTBOX_CYCLE_SECONDS ({settings.OUTBOX_CYCLE_SECONDS}) + "
            f"WEBPUSH_CONNECT_TIMEOUT ({settings.WEBPUSH_CONNECT_TIMEOUT:g}) + "
            f"WEBPUSH_READ_TIMEOUT ({settings.WEBPUSH_READ_TIMEOUT:g}) + margin ({MARGIN:g}) "
            f"= {floor:g} seconds"
        )


class Lease:
    """The lease of one claimed batch. `beat` runs on the dispatcher's own thread (it writes
    the database); `may_start` is asked by the delivery threads."""

    def __init__(self, holder: str, attempts: Mapping[int, int], clock: Clock) -> None:
        self.fence = Fence(holder, dict(attempts))
        self.clock = clock
        # Beat often enough that the lease left never drops below a delivery's worth plus
        # the margin (the floor guarantees this is positive).
        spare = settings.OUTBOX_LEASE_SECONDS - delivery_budget() - MARGIN
        self.interval = max(min(settings.OUTBOX_LEASE_SECONDS / 3, spare / 2), 0.5)
        self.held: frozenset[int] = frozenset(attempts)
        self._lock = threading.Lock()
        self._renewed = time.monotonic()  # claimed (just now) counts as renewed
        self._expires = self._renewed + settings.OUTBOX_LEASE_SECONDS

    def beat(self, starting: Iterable[int] = ()) -> frozenset[int]:
        """Renew the lease of the rows still held (and write the intent of `starting`).
        Returns the rows still held."""
        started = time.monotonic()
        held = renew_lease(self.fence, self.clock(), starting=starting)
        with self._lock:
            self.held = frozenset(held)
            self._renewed = started
            self._expires = started + settings.OUTBOX_LEASE_SECONDS
        return self.held

    def beat_if_due(self) -> None:
        if time.monotonic() - self._renewed >= self.interval:
            self.beat()

    def may_start(self, row_id: int) -> bool:
        """Whether a delivery of `row_id` may start now: still held, with a delivery's worth
        of lease left."""
        with self._lock:
            held, expires = row_id in self.held, self._expires
        return held and expires - time.monotonic() >= delivery_budget() + MARGIN
