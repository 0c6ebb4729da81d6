"""No index a wider one already serves: a price point's listing and a watch's device.

`pricepoint_listing_time` (listing, observed_at) and `watch_by_device` (device, created_at)
lead with those columns, so the foreign keys' own one-column indexes answered no lookup the
wider ones could not, and cost every insert (a price point with each changed observation)
one more index entry. Dropped with a plain DROP INDEX (`common.schema`), not a table rebuild
on SQLite. `tests/test_migrations.py` checks that no model declares such an index again."""

import django.db.models.deletion
from django.db import migrations, models

from common.schema import unindexed_foreign_keys


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0010_listing_updates_stay_hot"),
    ]

    operations = [
        unindexed_foreign_keys(
            "watches",
            [
                migrations.AlterField(
                    model_name="pricepoint",
                    name="listing",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="price_points",
                        to="watches.listing",
                        verbose_name="listing",
                    ),
                ),
                migrations.AlterField(
                    model_name="watch",
                    name="device",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="watches",
                        to="watches.device",
                        verbose_name="device",
                    ),
                ),
            ],
        ),
    ]
