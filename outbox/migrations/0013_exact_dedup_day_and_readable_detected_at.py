"""The dedup day exact to the microsecond on SQLite, and a detected_at the day can read.

SQLite reads a time's fraction to whole milliseconds, rounding, so a row detected at
14:59:59.9995–.999999 UTC counted as the next Tokyo day in `outbox_one_per_watch_trigger_day_
channel`. `outbox.expressions.LocalDate` now cuts the fraction from the text before `date()`
reads it; the index is built again here from that expression (on SQLite only: PostgreSQL's
`AT TIME ZONE` was exact and its index is unchanged).

The CHECK refuses, on SQLite, a detected_at that the day cannot read (an integer, text that is
not a time, an offset SQLite does not know), which a raw writer could store and which would
slip past the dedup (a NULL day is never equal to another). Adding it rebuilds the table on
SQLite; rows Django wrote pass. On PostgreSQL the column's type already says it is a time.

Reversing drops the CHECK; the day stays exact (the code that reads it is the same).
docs/decisions/0057-exact-dedup-day-on-sqlite.md."""

from django.db import migrations, models

import outbox.expressions

DAY_INDEX = "outbox_one_per_watch_trigger_day_channel"


def rebuild_day_index(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    model = apps.get_model("outbox", "Outbox")
    (constraint,) = [c for c in model._meta.constraints if c.name == DAY_INDEX]
    schema_editor.remove_constraint(model, constraint)
    schema_editor.add_constraint(model, constraint)


class Migration(migrations.Migration):
    dependencies = [
        ("outbox", "0012_marketplace_halted"),
    ]

    operations = [
        migrations.RunPython(rebuild_day_index, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="outbox",
            constraint=models.CheckConstraint(
                condition=outbox.expressions.ReadableTime("detected_at"),
                name="outbox_detected_at_is_a_time",
            ),
        ),
    ]
