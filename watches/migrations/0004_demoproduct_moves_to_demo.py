"""The demo marketplace's catalogue leaves `watches` for its own app, `demo`.

`watches` forgets the model (state only) and hands the table over under its new owner's name,
`demo_demoproduct`, rows untouched; `demo.0001_initial` takes the model up on that table.
The demo app may not be installed (DEMO_MARKET off): the table then waits, unused, until it
is. The demo tick's task moved too, so schedules made before point at its new place.
Reversible: backwards, the table gets its old name and the schedules their old task.
"""

from django.db import migrations

OLD_TASK = "watches.tasks.demo_tick"
NEW_TASK = "demo.tasks.demo_tick"


def _repoint(old: str, new: str):
    def run(apps, schema_editor) -> None:
        Schedule = apps.get_model("django_q", "Schedule")
        Schedule.objects.using(schema_editor.connection.alias).filter(func=old).update(func=new)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0003_device_transfer_and_unique_endpoint"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AlterModelTable(name="demoproduct", table="demo_demoproduct"),
            ],
            state_operations=[
                migrations.DeleteModel(name="DemoProduct"),
            ],
        ),
        migrations.RunPython(_repoint(OLD_TASK, NEW_TASK), _repoint(NEW_TASK, OLD_TASK)),
    ]
