"""Schema steps that Django's own operations make too costly on a large table.

Turning a foreign key's `db_index` off with `AlterField` drops its index on PostgreSQL, but
on SQLite it rebuilds the whole table (copies every row) to do so — minutes for a table of
events or price points in the millions. `unindexed_foreign_keys` is the same change as a
state-only `AlterField` plus a plain `DROP INDEX` on either database, and back.
"""

from __future__ import annotations

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
from django.db.models import Field, Index, Model


def unindexed_foreign_keys(
    app_label: str, alters: list[migrations.AlterField]
) -> migrations.SeparateDatabaseAndState:
    """`alters` (each a foreign key of `app_label` to db_index=False) for the state; for the
    database, each field's own one-column index (the one `db_index=True` made, whatever its
    name) dropped, or created back when reversed."""

    def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for alter in alters:
            model = apps.get_model(app_label, alter.model_name)
            for name in _own_indexes(schema_editor, model, alter.name):
                schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")

    def restore(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        for alter in alters:
            model = apps.get_model(app_label, alter.model_name)
            if not _own_indexes(schema_editor, model, alter.name):
                column = _column(model, alter.name)
                name = f"{model._meta.db_table}_{column}_idx"[:63]
                schema_editor.add_index(model, Index(fields=[alter.name], name=name))

    return migrations.SeparateDatabaseAndState(
        state_operations=alters,
        database_operations=[migrations.RunPython(drop, restore)],
    )


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.column is None:
        raise ValueError(f"{name} is not a column of {model._meta.label}")
    return field.column


def _own_indexes(
    schema_editor: BaseDatabaseSchemaEditor, model: type[Model], field_name: str
) -> list[str]:
    """The plain one-column indexes of the field's column that no Meta index names (on
    SQLite and PostgreSQL, the only databases the project runs on: a bare DROP INDEX)."""
    column = _column(model, field_name)
    named = {index.name for index in model._meta.indexes}
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(
            cursor, model._meta.db_table
        )
    return sorted(
        name
        for name, info in constraints.items()
        if info["index"]
        and info["type"] == Index.suffix  # a plain (b-tree) index, as db_index makes
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == [column]
        and name not in named
    )
