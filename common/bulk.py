"""Writing many rows of one table, each with its own values, in one round trip."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from operator import itemgetter
from typing import Any

from django.db import connection, models

from common.fields import concrete_field


def update_by_id(
    model: type[models.Model],
    fields: Sequence[str],
    rows: Iterable[tuple[Any, Sequence[Any]]],
    *,
    locked: bool = False,
    lowering: Collection[str] = (),
    unless_later: str | None = None,
) -> int:
    """For each (id, values) of `rows`, `UPDATE <table> SET <fields> = <values> WHERE id = …`;
    each value is prepared by its field exactly as the ORM would save it. Cheaper than
    `bulk_update`, which builds a CASE over every id for every field. Returns how many rows
    were given.

    A field named in `lowering` only ever goes down: it takes the value given where that is
    lower than the stored one or nothing is stored, and keeps the stored one otherwise (and
    where the value given is NULL) — decided in the statement, so a concurrent writer's
    lower value is never overwritten by one read before it.

    `unless_later` names one of `fields` (a time): a row whose stored value of it is later
    than the one given keeps every stored value — a state written from a newer observation
    is not replaced by an older one saved after it. Decided in the statement too.

    SQLite: one executemany. PostgreSQL: the rows locked lowest id first (unless the caller
    says it holds their locks already, `locked`), then one `UPDATE … FROM unnest(<one array
    per column>)` — one statement to parse whatever the number of rows (an executemany is a
    statement per row, each composed and parsed anew)."""
    if isinstance(lowering, str):
        raise TypeError("lowering is a collection of field names, not one name")
    model_fields = [concrete_field(model, name) for name in fields]
    # Lowest id first: two transactions updating overlapping rows then lock them in the same
    # order and cannot deadlock each other on PostgreSQL.
    rows = sorted(rows, key=itemgetter(0))
    if any(len(values) != len(model_fields) for _, values in rows):
        raise ValueError(f"each row needs {len(model_fields)} values: {', '.join(fields)}")
    if unless_later is not None and unless_later not in fields:
        raise ValueError(f"unless_later must be one of the fields written: {unless_later}")
    if not rows:
        return 0
    ids = [pk for pk, _ in rows]
    # Column by column (zip transposes in C): each column's distinct values prepared once.
    transposed = zip(*(values for _, values in rows), strict=True)
    columns = [
        _prepared(field, list(values))
        for field, values in zip(model_fields, transposed, strict=True)
    ]
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    if connection.vendor == "postgresql":
        _update_unnest(
            model,
            model_fields,
            [*columns, ids],
            lock=not locked,
            lowering=lowering,
            unless_later=unless_later,
        )
        return len(ids)
    quote = connection.ops.quote_name
    assignments = ", ".join(
        # SQLite's two-argument MIN is NULL when either is: each side falls back to the other.
        f"{quote(f.column)} = MIN(COALESCE({quote(f.column)}, %s), COALESCE(%s, {quote(f.column)}))"
        if f.name in lowering
        else f"{quote(f.column)} = %s"
        for f in model_fields
    )
    # A lowering column's value goes in twice (its two placeholders above).
    placed = [
        column
        for field, column in zip(model_fields, columns, strict=True)
        for column in ((column, column) if field.name in lowering else (column,))
    ]
    where, keys = f"{pk} = %s", [ids]
    if unless_later is not None:
        stamp = quote(concrete_field(model, unless_later).column)
        where += f" AND ({stamp} IS NULL OR {stamp} <= %s)"
        keys.append(columns[list(fields).index(unless_later)])
    with connection.cursor() as cursor:
        # Only quoted identifiers are formatted in; every value is a parameter.
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE {where}",  # noqa: S608
            list(zip(*placed, *keys, strict=True)),
        )
    return len(ids)


def _prepared(field: models.Field[Any, Any], values: list[Any]) -> list[Any]:
    """`values` as `field` saves each, as the ORM would. Rows often share a value (the same
    `now` for every baseline a batch moves, the same stock and error for most listings), and
    preparing a datetime or a decimal costs more than the UPDATE it goes into: each distinct
    value is prepared once — unless the column mixes types (1 and True are one key of a
    dict) or holds an unhashable value (a dict for a JSON field)."""
    try:
        distinct = set(values)
    except TypeError:
        return [field.get_db_prep_save(value, connection) for value in values]
    if len(set(map(type, values))) > 1:
        return [field.get_db_prep_save(value, connection) for value in values]
    prepared = {value: field.get_db_prep_save(value, connection) for value in distinct}
    return list(map(prepared.__getitem__, values))


def _update_unnest(
    model: type[models.Model],
    model_fields: list[models.Field[Any, Any]],
    columns: list[list[Any]],
    *,
    lock: bool,
    lowering: Collection[str],
    unless_later: str | None,
) -> None:
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    pk_field = model._meta.pk
    pk = quote(pk_field.column)
    all_fields = [*model_fields, pk_field]
    names = [f"c{i}" for i in range(len(all_fields))]
    # `Field.cast_db_type` is Django's public API (what `Cast` uses); django-stubs lacks it.
    arrays = ", ".join(
        f"%s::{f.cast_db_type(connection)}[]"  # type: ignore[attr-defined]
        for f in all_fields
    )
    assignments = ", ".join(
        # LEAST ignores NULLs: the lower of the two, or whichever is not NULL.
        f"{quote(f.column)} = LEAST(t.{quote(f.column)}, u.{name})"
        if f.name in lowering
        else f"{quote(f.column)} = u.{name}"
        for f, name in zip(model_fields, names, strict=False)
    )
    ids = columns[-1]
    later = ""
    if unless_later is not None:
        position = [f.name for f in model_fields].index(unless_later)
        stamp = quote(model_fields[position].column)
        later = f" AND (t.{stamp} IS NULL OR t.{stamp} <= u.{names[position]})"
    with connection.cursor() as cursor:
        # The join below may visit the rows in any order: lock them in id order first, so
        # two overlapping updates cannot deadlock. Only quoted identifiers are formatted in.
        if lock:
            cursor.execute(
                f"SELECT 1 FROM {table} WHERE {pk} = ANY(%s) ORDER BY {pk} FOR UPDATE",  # noqa: S608
                [ids],
            )
        cursor.execute(
            f"UPDATE {table} AS t SET {assignments} "  # noqa: S608
            f"FROM unnest({arrays}) AS u({', '.join(names)}) WHERE t.{pk} = u.{names[-1]}"
            f"{later}",
            columns,
        )
