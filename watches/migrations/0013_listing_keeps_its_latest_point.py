"""Each listing keeps its latest price point on its own row (`watches.latest_point`): four
columns, the triggers that keep them for every writer of history, and every listing's derived
from the history once."""

from django.db import migrations, models


def install(apps, schema_editor):
    from watches.latest_point import install

    install(schema_editor.connection)


def uninstall(apps, schema_editor):
    from watches.latest_point import uninstall

    uninstall(schema_editor.connection)


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
        migrations.RunPython(install, uninstall),
    ]
