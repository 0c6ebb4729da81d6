"""The service's local day of a timestamp, as SQL the database evaluates natively, and the
check that a stored time is one that day can be read from.

Used in the outbox's day-dedup unique index and its CHECK constraint. They must not depend on
Django-registered SQLite functions (a plain `sqlite3` writer, the CLI and `VACUUM` would fail)
nor on the TIME_ZONE of whoever ran `migrate`: the zone is an argument, recorded in the
migration (decision 0002). On SQLite the day is exact to the microsecond, for Django's text
and a raw writer's alike (decision 0057).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

from django.db import models
from django.utils.deconstruct import deconstructible

_ZONE_NAME = re.compile(r"^[A-Za-z0-9_+\-/]+$")

# SQLite reads a time's fraction to whole milliseconds, rounding (14:59:59.9995 would be
# 15:00:00.000): the fraction is cut from the text before a date function reads it, and what
# follows it (a raw writer's "Z" or "+09:00") is kept. {x} is the column.
_SQLITE_TO_THE_SECOND = "(substr({x}, 1, 19) || ltrim(substr({x}, 20), '.0123456789'))"
# What SQLite's day above and Django's reader of a DateTimeField both read as the same
# instant: text "YYYY-MM-DD HH:MM:SS" (or a "T" between), a real date and time, an optional
# fraction of 1 to 12 digits, then nothing, "Z" or an offset SQLite reads ("+09:00"). Written
# with no ", ": it becomes part of the table's SQL, which Django's SQLite introspection reads
# by splitting it there.
_SQLITE_READABLE_TIME = " AND ".join(
    [
        "typeof({x}) = 'text'",
        "substr({x}, 11, 1) IN (' ', 'T')",
        "substr({x}, 1, 4) <> '0000'",
        # date() alone lets "02-31" and "24:00" through; a modifier makes it normalise them.
        "datetime(substr({x}, 1, 10) || ' ' || substr({x}, 12, 8), '+0 seconds')"
        " = substr({x}, 1, 10) || ' ' || substr({x}, 12, 8)",
        "(ltrim(substr({x}, 20), '.0123456789') = substr({x}, 20)"
        " OR (substr({x}, 20, 1) = '.'"
        " AND instr(substr({x}, 21), '.') = 0"
        " AND length(substr({x}, 20)) - length(ltrim(substr({x}, 20), '.0123456789'))"
        " BETWEEN 2 AND 13))",
        "(ltrim(substr({x}, 20), '.0123456789') IN ('', 'Z')"
        " OR (ltrim(substr({x}, 20), '.0123456789') GLOB '[+-][0-9][0-9]:[0-9][0-9]'"
        f" AND datetime({_SQLITE_TO_THE_SECOND}) IS NOT NULL))",
    ]
).replace(", ", ",")


def _sqlite(compiler, expression, template: str) -> tuple[str, list]:
    """`template` with each {x} replaced by `expression`'s SQL, and its parameters repeated
    as often (a constraint's validation compiles the column as a parameter)."""
    sql, params = compiler.compile(expression)
    return "(" + template.replace("{x}", sql) + ")", list(params) * template.count("{x}")


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
    assert offset is not None  # an aware datetime always has an offset in its zone
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
        template = f"date({_SQLITE_TO_THE_SECOND}, '{hours:+d} hours')"
        return _sqlite(compiler, self.get_source_expressions()[0], template)

    def as_postgresql(self, compiler, connection, **extra_context):
        template = f"((%(expressions)s AT TIME ZONE '{self.zone}')::date)"
        return super().as_sql(compiler, connection, template=template, **extra_context)


@deconstructible(path="outbox.expressions.ReadableTime")
class ReadableTime(models.Func):
    """`ReadableTime("detected_at")`: true for a time `LocalDate` reads exactly and Django
    reads back as the same instant. On SQLite, where a column takes any text or number, it
    refuses the rest (`_SQLITE_READABLE_TIME`); PostgreSQL's timestamp type already does."""

    output_field = models.BooleanField()
    arity = 1

    def as_sql(self, compiler, connection, **extra_context):
        raise NotImplementedError(f"ReadableTime is not implemented for {connection.vendor}")

    def as_sqlite(self, compiler, connection, **extra_context):
        return _sqlite(compiler, self.get_source_expressions()[0], _SQLITE_READABLE_TIME)

    def as_postgresql(self, compiler, connection, **extra_context):
        template = "(%(expressions)s IS NOT NULL)"
        return super().as_sql(compiler, connection, template=template, **extra_context)
