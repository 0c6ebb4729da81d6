"""A delivery channel that records what it was asked to deliver and can be told to fail.

Stands in for the outside world (a push service) in dispatcher tests that are not about Web
Push itself; the Web Push tests use a real HTTP fake instead."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from outbox.channels.base import DeliveryError, Message


class RecordingChannel:
    name = "recording"
    lock = threading.Lock()
    # Every row told, with its own message: a digest adds one entry per row it tells.
    delivered: list[tuple[int, Message]] = []
    # Every message the channel was asked to deliver (a digest is one).
    sends: list[Message] = []
    # Errors to raise, in order, before delivering normally again.
    failures: deque[DeliveryError] = deque()
    # Called during each delivery (a slow push service: the test moves the clock on).
    during: Callable[[], None] | None = None

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.delivered = []
            cls.sends = []
            cls.failures = deque()
            cls.during = None

    def deliver(self, row, message: Message) -> dict | None:
        during = vars(type(self))["during"]  # a plain function, not a method
        if during is not None:
            during()
        with self.lock:
            if self.failures:
                raise self.failures.popleft()
            self.sends.append(message)
            if message.items:
                self.delivered.extend(zip(message.rows, message.items, strict=True))
            else:
                self.delivered.append((row.pk, message))
        return None
