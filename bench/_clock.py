"""Simulated time for the benches that drive the real rate limiter: the limiter reads and
sleeps on it (a wait moves it instead of sleeping); Django's clock follows (time-machine)."""

from __future__ import annotations

import datetime as dt


class SimClock:
    def __init__(self, start: dt.datetime) -> None:
        import time_machine

        self.now = start.timestamp()
        self._travel = time_machine.travel(start, tick=False)
        self._coordinates = self._travel.start()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self._coordinates.shift(seconds)

    def move_to(self, timestamp: float) -> None:
        self.now = timestamp
        self._coordinates.move_to(dt.datetime.fromtimestamp(timestamp, dt.UTC))

    def stop(self) -> None:
        self._travel.stop()
