"""The dispatcher's clock: every time it writes is read from this at the moment it describes
(the claim, the channel's answer), never one `now` for a whole cycle.

A clock is any callable returning an aware UTC datetime; tests pass their own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.utils import timezone

Clock = Callable[[], dt.datetime]


def system_clock() -> dt.datetime:
    return timezone.now()
