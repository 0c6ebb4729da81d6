"""No index a wider one already serves: an event's row, an outbox row's device, a count
snapshot row's snapshot.

`outboxevent_row_time` (outbox, at), `outbox_by_device` (device, created_at) and the unique
key of a snapshot's rows lead with those columns, so the foreign keys' own one-column
indexes answered no lookup the wider ones could not, and cost each insert — two or more
events for every delivery, a row for every enqueue — one more index entry (and on
PostgreSQL each outbox row's status change too, which rewrites every index entry of the row).
Dropped with a plain DROP INDEX (`common.schema`), not a table rebuild on SQLite."""

import django.db.models.deletion
from django.db import migrations, models

from common.schema import unindexed_foreign_keys


class Migration(migrations.Migration):
    dependencies = [
        ("outbox", "0007_lease_beats_stay_hot"),
        ("watches", "0011_no_redundant_fk_indexes"),
    ]

    operations = [
        unindexed_foreign_keys(
            "outbox",
            [
                migrations.AlterField(
                    model_name="countsnapshotrow",
                    name="snapshot",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rows",
                        to="outbox.countsnapshot",
                    ),
                ),
                migrations.AlterField(
                    model_name="outbox",
                    name="device",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="outbox_rows",
                        to="watches.device",
                    ),
                ),
                migrations.AlterField(
                    model_name="outboxevent",
                    name="outbox",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="outbox.outbox",
                    ),
                ),
            ],
        ),
    ]
