"""Each listing kept its latest price point on its own row: four columns, kept by triggers
on the price points' table. Both were removed by 0014 (a per-batch read of the history serves
instead); a database migrated from scratch never gets the triggers."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0012_watch_baseline_names_its_detection"),
    ]

    operations = [
        migrations.AddField(
            model_name="listing",
            name="point_at",
            field=models.DateTimeField(
                blank=True, editable=False, null=True, verbose_name="latest point at"
            ),
        ),
        migrations.AddField(
            model_name="listing",
            name="point_in_stock",
            field=models.BooleanField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="listing",
            name="point_price",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="listing",
            name="point_shipping",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
    ]
