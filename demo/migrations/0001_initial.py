"""The demo catalogue's model, taken over from `watches` (its 0004 renamed the table to
`demo_demoproduct`, rows untouched): state only, nothing is created. The model's content
type moves with it, so staff permissions and admin history on demo products carry over.
Reversible."""

from django.db import migrations, models


def _move_content_type(old_label: str, new_label: str):
    def run(apps, schema_editor) -> None:
        ContentType = apps.get_model("contenttypes", "ContentType")
        types = ContentType.objects.using(schema_editor.connection.alias)
        # A fresh database has neither yet: post_migrate creates the new one at the end.
        if not types.filter(app_label=new_label, model="demoproduct").exists():
            types.filter(app_label=old_label, model="demoproduct").update(app_label=new_label)

    return run


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("watches", "0004_demoproduct_moves_to_demo"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DemoProduct",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("item_code", models.CharField(max_length=100, unique=True)),
                        ("name", models.CharField(max_length=500)),
                        ("shop_name", models.CharField(default="Yasugoro Demo Shop", max_length=200)),
                        ("category", models.CharField(blank=True, max_length=100)),
                        ("image_url", models.URLField(blank=True, max_length=1000)),
                        ("units_per_pack", models.PositiveIntegerField(blank=True, null=True)),
                        ("unit_label", models.CharField(blank=True, max_length=20)),
                        ("price", models.PositiveIntegerField()),
                        ("shipping", models.PositiveIntegerField(blank=True, null=True)),
                        ("in_stock", models.BooleanField(default=True)),
                        ("fault", models.CharField(blank=True, choices=[("", "None (answers normally)"), ("rate_limited", "Rate limited"), ("server", "Server error"), ("network", "Network error"), ("bad_response", "Malformed response")], default="", max_length=20)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            _move_content_type("watches", "demo"), _move_content_type("demo", "watches")
        ),
    ]
