"""Time that moves only when someone sleeps (or the test says so), for rate limiters."""

from __future__ import annotations

import threading


class FakeClock:
    """Time that moves only when someone sleeps (or the test says so)."""

    def __init__(self, *, sleeping_moves_time: bool = True) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self._moves = sleeping_moves_time
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            if self._moves:
                self.now += seconds
