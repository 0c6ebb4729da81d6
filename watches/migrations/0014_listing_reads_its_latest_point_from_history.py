"""The latest price point is read from the history per batch again (`watches.polling.poll`): the
triggers that kept a copy on each listing's row, and the four columns, go."""

from django.db import migrations

TRIGGERS = (
    "watches_pricepoint_latest_ai",
    "watches_pricepoint_latest_ad",
    "watches_pricepoint_latest_au",
)


def drop_triggers(apps, schema_editor):
    quote = schema_editor.quote_name
    for name in TRIGGERS:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {quote(name)} ON watches_pricepoint")
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {quote(name)}()")
        else:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {quote(name)}")


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0013_listing_keeps_its_latest_point"),
    ]

    operations = [
        migrations.RunPython(drop_triggers, migrations.RunPython.noop),
        migrations.RemoveField(model_name="listing", name="point_at"),
        migrations.RemoveField(model_name="listing", name="point_in_stock"),
        migrations.RemoveField(model_name="listing", name="point_price"),
        migrations.RemoveField(model_name="listing", name="point_shipping"),
    ]
