"""The lease a dispatcher holds on the rows it claimed, kept alive while it works.

A claim stamps `claimed_at`; another dispatcher takes a row over once `claimed_at` is older
than OUTBOX_LEASE_SECONDS. So that this never happens under a live dispatcher:

- the heartbeat: while a batch is being worked on (guards, re-fetch, deliveries), a thread
  moves `claimed_at` of every row the batch still holds to now, every `interval` seconds,
  fenced by holder and attempt number like every other write (`renew_lease`); the
  dispatcher also beats once right before the deliveries start, writing each row's
  `attempt_started_at` (the intent);
- the send gate (`Lease.may_start`): a delivery starts only on a row still held, with at
  least one delivery's worth of lease left (`delivery_budget`) plus MARGIN; otherwise
  the row is retried rather than sent by a dispatcher that may be about to lose it;
- the floor (`check_settings`, at start-up): the heartbeat beats every
  (lease − delivery − MARGIN) / 2 seconds, so the lease left never falls below a delivery
  plus MARGIN; that needs lease ≥ 2 × one delivery + MARGIN, so that a beat is
  due no less often than a delivery can take. The cycle budget plays no part: a lease no
  longer has to outlast a cycle, only the gap between two beats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from common.retrying import retrying
from outbox.clock import Clock
from outbox.transitions import Fence, renew_lease

log = logging.getLogger("outbox.dispatch")

# Seconds of slack above the arithmetic: database writes, a slow thread start, clock steps.
MARGIN = 5.0


def delivery_budget() -> float:
    """The longest one delivery may take: Web Push's connect and read timeouts, or the
    e-mail channel's socket timeout, whichever is longer."""
    webpush = settings.WEBPUSH_CONNECT_TIMEOUT + settings.WEBPUSH_READ_TIMEOUT
    return max(webpush, getattr(settings, "EMAIL_TIMEOUT", 0.0))


def lease_floor() -> float:
    return 2 * delivery_budget() + MARGIN


def check_settings() -> None:
    """Refuse a lease the heartbeat could not keep ahead of a delivery."""
    floor = lease_floor()
    if floor > settings.OUTBOX_LEASE_SECONDS:
        raise ImproperlyConfigured(
            f"OUTBOX_LEASE_SECONDS={settings.OUTBOX_LEASE_SECONDS} is too short: it must be at "
            f"least 2 × the longest delivery {delivery_budget():g} (WEBPUSH_CONNECT_TIMEOUT "
            f"{settings.WEBPUSH_CONNECT_TIMEOUT:g} + WEBPUSH_READ_TIMEOUT "
            f"{settings.WEBPUSH_READ_TIMEOUT:g}, or EMAIL_TIMEOUT "
            f"{getattr(settings, 'EMAIL_TIMEOUT', 0.0):g}) + margin {MARGIN:g} "
            f"= {floor:g} seconds (a heartbeat renews the lease every "
            "(lease − one delivery − margin) / 2 seconds)"
        )


class Lease:
    """The lease of one claimed batch, renewed by a heartbeat thread between `start` and
    `stop`. `may_start` is asked by the delivery threads."""

    def __init__(self, holder: str, attempts: Mapping[int, int], clock: Clock) -> None:
        self.fence = Fence(holder, dict(attempts))
        self.clock = clock
        lease = settings.OUTBOX_LEASE_SECONDS
        self.interval = max((lease - delivery_budget() - MARGIN) / 2, 0.5)
        self.held: frozenset[int] = frozenset(attempts)
        self._lock = threading.Lock()  # one beat at a time, and consistent reads
        self._beating = threading.Lock()
        self._expires = time.monotonic() + lease  # claimed just now
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self._thread = threading.Thread(
            target=self._run, name=f"outbox-lease-{self.fence.holder}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self.interval):
                try:
                    self.beat()
                except Exception:  # the gate closes by itself when beats stop succeeding
                    log.exception("lease heartbeat of %s failed", self.fence.holder)
        finally:
            connection.close()  # this thread's own connection

    def beat(
        self,
        starting: Iterable[int] = (),
        digests: Mapping[int, Mapping[str, str]] | None = None,
    ) -> frozenset[int]:
        """Renew the lease of the rows still held (and write the intent of `starting`, with
        the digest each goes out in: `renew_lease`). Returns the rows still held. A beat the
        database ends to break a deadlock is run again (`common.retrying`)."""
        starting = tuple(starting)
        with self._beating:
            started = time.monotonic()
            held = retrying(
                lambda: renew_lease(self.fence, self.clock(), starting=starting, digests=digests)
            )
            with self._lock:
                self.held = frozenset(held)
                self._expires = started + settings.OUTBOX_LEASE_SECONDS
        return self.held

    def may_start(self, row_id: int) -> bool:
        """Whether a delivery of `row_id` may start now: still held, with a delivery's worth
        of lease left (and the margin)."""
        with self._lock:
            held, expires = row_id in self.held, self._expires
        return held and expires - time.monotonic() >= delivery_budget() + MARGIN
