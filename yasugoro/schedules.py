"""Idempotent django-q2 schedules, (re)created by every `migrate` through post_migrate.

`Schedule.name` is not unique in the database, so we look it up by name ourselves. A
`next_run` far in the past makes the scheduler step one interval at a time (decision 0008), so a
schedule found with a stale `next_run` is moved to now.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone


def ensure_schedule(name: str, func: str, *, minutes: int) -> None:
    from django_q.models import Schedule

    now = timezone.now()
    wanted = {"func": func, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1}
    existing = Schedule.objects.filter(name=name).order_by("id")
    schedule = existing.first()
    if schedule is None:
        Schedule.objects.create(name=name, next_run=now, **wanted)
        return
    existing.exclude(pk=schedule.pk).delete()  # duplicates from a manual edit
    changed = [key for key, value in wanted.items() if getattr(schedule, key) != value]
    for key in changed:
        setattr(schedule, key, wanted[key])
    if schedule.next_run is None or schedule.next_run < now - dt.timedelta(minutes=minutes):
        schedule.next_run = now
        changed.append("next_run")
    if changed:
        schedule.save(update_fields=changed)


def remove_schedule(name: str) -> int:
    """Delete the schedules named `name`; returns how many there were."""
    from django_q.models import Schedule

    deleted, _ = Schedule.objects.filter(name=name).delete()
    return deleted
