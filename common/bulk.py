"""Writing many rows of one table, each with its own values, in one round trip."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, models


def update_by_id(
    model: type[models.Model], fields: Sequence[str], rows: Iterable[tuple[Any, Sequence[Any]]]
) -> int:
    """For each (id, values) of `rows`, `UPDATE <table> SET <fields> = <values> WHERE id = …`,
    all through one executemany; each value is prepared by its field exactly as the ORM would
    save it. Cheaper than `bulk_update`, which builds a CASE over every id for every field.
    Returns how many rows were given."""
    model_fields = [model._meta.get_field(name) for name in fields]
    prepared: list[dict[tuple[type, Any], Any]] = [{} for _ in model_fields]

    def prep(index: int, value: Any) -> Any:
        # Rows often share a value (the same `now` for every baseline a batch moves), and
        # preparing a datetime or a decimal costs more than the UPDATE it goes into: each
        # distinct value is prepared once. Keyed by type too, so 1 and True stay apart.
        try:
            return prepared[index][(type(value), value)]
        except KeyError:
            done = prepared[index][(type(value), value)] = model_fields[index].get_db_prep_save(
                value, connection
            )
            return done
        except TypeError:  # unhashable (a dict for a JSON field): prepared every time
            return model_fields[index].get_db_prep_save(value, connection)

    params = [
        [prep(i, value) for i, value in enumerate(values)] + [pk]
        # Lowest id first: two transactions updating overlapping rows then lock them in the
        # same order and cannot deadlock each other on PostgreSQL.
        for pk, values in sorted(rows, key=lambda row: row[0])
    ]
    if any(len(row) != len(model_fields) + 1 for row in params):
        raise ValueError(f"each row needs {len(model_fields)} values: {', '.join(fields)}")
    if not params:
        return 0
    columns = ", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in model_fields)
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        # Only quoted identifiers are formatted in; every value is a parameter.
        cursor.executemany(f"UPDATE {table} SET {columns} WHERE {pk} = %s", params)  # noqa: S608
    return len(params)
