"""The service's local day of a timestamp, as SQL the database evaluates natively.

Used in the outbox's day-dedup unique index. It must not depend on Django-registered SQLite
functions (a plain `sqlite3` writer, the CLI and `VACUUM` would fail) nor on the TIME_ZONE of
whoever ran `migrate`: the zone is an argument, recorded in the migration (decision 0002).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

from django.db import models
from django.utils.deconstruct import deconstructible

_ZONE_NAME = re.compile(r"^[A-Za-z0-9_+\-/]+$")


def fixed_offset_hours(zone: str) -> int:
    """The zone's UTC offset in whole hours, refusing zones with DST or odd offsets: SQLite's
    date() can only add a fixed modifier."""
    tz = zoneinfo.ZoneInfo(zone)
    probes = [
        dt.datetime(year, month, 15, tzinfo=dt.UTC) for year in (2020, 2030) for month in (1, 7)
    ]
    offsets = {probe.astimezone(tz).utcoffset() for probe in probes}
    if len(offsets) != 1:
        raise ValueError(f"{zone} has daylight saving time; SQLite needs a fixed-offset zone")
    (offset,) = offsets
    seconds = int(offset.total_seconds())
    if seconds % 3600:
        raise ValueError(f"{zone} is not a whole-hour offset")
    return seconds // 3600


@deconstructible(path="outbox.expressions.LocalDate")
class LocalDate(models.Func):
    """`LocalDate("detected_at", zone="Asia/Tokyo")`: the calendar date in that zone."""

    output_field = models.DateField()
    arity = 1

    def __init__(self, expression, *, zone: str) -> None:
        if not _ZONE_NAME.match(zone):
            raise ValueError(f"bad zone name {zone!r}")
        zoneinfo.ZoneInfo(zone)  # raises for an unknown zone
        self.zone = zone
        super().__init__(expression)

    def as_sql(self, compiler, connection, **extra_context):
        raise NotImplementedError(f"LocalDate is not implemented for {connection.vendor}")

    def as_sqlite(self, compiler, connection, **extra_context):
        hours = fixed_offset_hours(self.zone)
        # The zone name is validated above, and the offset is an int: safe to inline, which
        # an index definition requires (it cannot take parameters).
        template = f"date(%(expressions)s, '{hours:+d} hours')"
        return super().as_sql(compiler, connection, template=template, **extra_context)

    def as_postgresql(self, compiler, connection, **extra_context):
        template = f"((%(expressions)s AT TIME ZONE '{self.zone}')::date)"
        return super().as_sql(compiler, connection, template=template, **extra_context)
