"""The earliest moment something being computed will read differently by the clock alone —
a points campaign's end — so that a cache keeping the result keeps it no longer.

A computation runs inside `collecting()`; whatever it reads that holds only until a moment
`note`s that moment (a moment already past, or no collection running, is ignored). Nested
collections pass what they found to the one around them, so a page built from cached
fragments expires with the earliest of theirs."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Deadline:
    at: float = math.inf  # a Unix timestamp; inf: nothing read changes with the clock


_current: ContextVar[Deadline | None] = ContextVar("deadline", default=None)


@contextmanager
def collecting() -> Iterator[Deadline]:
    deadline = Deadline()
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)
    note(deadline.at)  # the computation around this one changes no later


def note(moment: dt.datetime | float) -> None:
    deadline = _current.get()
    if deadline is None:
        return
    at = moment.timestamp() if isinstance(moment, dt.datetime) else moment
    if time.time() < at < deadline.at:
        deadline.at = at
