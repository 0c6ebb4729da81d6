"""A watch's baseline says which detection it told: `last_notified_detected_at`.

The re-check dropped a row `already_notified` whenever the baseline had moved after the row's
detection — including when what moved it was the same detection's row on the device's other
channel (a device told on both push and e-mail): the second channel's row, judged in a later
batch or retried after a transient failure, was never sent. The re-check now compares
detections instead (`watches.triggers.recheck`).

Existing baselines take the detection time of the watch's newest sent row; a watch whose rows
retention has already removed takes the time it was told, which is what the re-check compared
with until now."""

from django.db import migrations, models

BACKFILL = """
UPDATE watches_watch SET last_notified_detected_at = COALESCE(
    (SELECT MAX(o.detected_at) FROM outbox_outbox o
     WHERE o.watch_id = watches_watch.id AND o.status = 'sent'),
    last_notified_at)
WHERE last_notified_at IS NOT NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0011_no_redundant_fk_indexes"),
        # The backfill reads the outbox's sent rows.
        ("outbox", "0009_fresh_value_expired"),
    ]

    operations = [
        migrations.AddField(
            model_name="watch",
            name="last_notified_detected_at",
            field=models.DateTimeField(
                blank=True, null=True, verbose_name="last notified detection"
            ),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
