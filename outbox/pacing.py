"""How fast a batch's deliveries are handed over: in steps the channel keeps up with.

A delivery may start only while the value it tells is at most OUTBOX_REFETCH_MAX_AGE old
(the send gate, `outbox.delivery`). A batch re-fetched at once and then delivered through a
slow channel would see its later values age past that while the earlier deliveries wait on
the channel. So a batch goes out in steps: each step is as many deliveries as the channel
took in a third of the bound, at the pace the last step measured (the first step one
delivery per worker, which all start at once); right before a step is handed over, every
value it tells that could be older than the bound by the time its delivery starts is
re-fetched and judged again (docs/decisions/0064-slow-channel.md).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

# A step lasts at most this share of OUTBOX_REFETCH_MAX_AGE, at the measured pace.
STEP_SHARE = 1 / 3
# A step may take this many times longer than its measured pace says before a value let
# through by its re-check grows older than the bound.
SLACK = 1.5


@dataclass
class Pace:
    """The pace of one batch's deliveries: `workers` deliveries start at once; `bound` is
    OUTBOX_REFETCH_MAX_AGE in seconds."""

    workers: int
    bound: float
    # Deliveries per second over the last step (None before the first).
    per_second: float | None = None

    def step_size(self) -> int:
        """How many deliveries the next step hands over: one per worker, and as many more as
        the channel takes in STEP_SHARE of the bound at the measured pace — a whole multiple of
        the workers, so that none waits idle for a step's last delivery."""
        if self.per_second is None:
            return self.workers
        more = int(self.per_second * self.bound * STEP_SHARE)
        return self.workers * (1 + math.ceil(more / self.workers))

    def fresh_within(self, size: int) -> dt.timedelta:
        """How old a value may be when a step of `size` deliveries is handed over, so that it
        is at most the bound when the last of them starts (with SLACK): the first `workers`
        start at once, the others as the ones before them end."""
        if self.per_second is None or size <= self.workers:
            span = 0.0
        else:
            span = (size - self.workers) / self.per_second
        return dt.timedelta(seconds=max(self.bound - SLACK * span, 0.0))

    def measured(self, deliveries: int, seconds: float) -> None:
        """A step handed over `deliveries` deliveries and saw the last one end `seconds`
        later."""
        if deliveries and seconds > 0:
            self.per_second = deliveries / seconds
