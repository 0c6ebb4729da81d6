"""Quiet hours: a claimed row whose device is inside its quiet window is not sent now.

It goes back to `retry` with the reason `quiet_hours`, its `next_attempt_at` at the window's
end and no retry counted (its `retry_count` stays, so the cap is never nearer for having
waited), fenced by the claim like every other outcome. When the window ends it is claimed,
re-fetched and re-checked like any other row: a sale that ended overnight is dropped
`condition_lost`, never sent stale. Held rows are not re-fetched: the marketplace is asked
only when something may go out.

The window is the device's (`Device.quiet_start`, `quiet_end`, local times in
`Device.time_zone`): `start <= t < end`, or, when it crosses midnight (start > end),
`t >= start or t < end`. Off while either end is empty.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections import Counter

from django.db import transaction

from outbox.models import Outbox, Reason, Status
from outbox.transitions import Fence, Outcome, transition_each
from watches.models import Device


def quiet_until(device: Device, now: dt.datetime) -> dt.datetime | None:
    """When `device`'s quiet window that contains `now` ends, or None when `now` is outside
    it (or the device has none): the device's own rule (`Device.quiet_until`), which its pages
    show too."""
    return device.quiet_until(now)


def device_zone(device: Device) -> zoneinfo.ZoneInfo:
    """The zone `device`'s quiet hours are set in (Tokyo for one the system no longer knows)."""
    return device.zone


def hold_quiet_rows(
    rows: list[Outbox], holder: str, now: dt.datetime
) -> tuple[list[Outbox], Counter[Status]]:
    """Hold the claimed `rows` whose device is in its quiet hours (see the module). Returns
    the rows left to re-check and send, and how many were held (as `retry`)."""
    until = {row.id: end for row in rows if (end := quiet_until(row.device, now)) is not None}
    if not until:
        return rows, Counter()
    outcomes = {
        row_id: Outcome(
            Status.RETRY,
            Reason.QUIET_HOURS,
            f"held until {end.isoformat()}",
            {"until": end.isoformat()},
            {"claimed_by": "", "next_attempt_at": end},
        )
        for row_id, end in until.items()
    }
    fence = Fence(holder, {row.id: row.attempts for row in rows if row.id in until})
    with transaction.atomic():
        won = transition_each(outcomes, expect=[Status.SENDING], fence=fence, actor=holder, now=now)
    return [row for row in rows if row.id not in until], Counter({Status.RETRY: len(won)})
