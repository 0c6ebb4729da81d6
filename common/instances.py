"""`list(queryset)` for the dispatcher's per-batch reads, each instance built by filling its
`__dict__` instead of through `Model.__init__`.

Django builds every fetched instance through `Model.from_db`: for a queryset with deferred
fields, a list of all the model's concrete fields with a placeholder for each deferred one
(a search of the loaded names per field), then `__init__`, one `setattr` per field and two
signals. For a dispatcher's batch — 500 outbox rows with their watches, up to 500 listings
and their devices — that was most of the 21 ms `_load` took per batch on SQLite (11 ms
since); the rows' query itself takes under 2 ms.

`load(queryset)` gives what `list(queryset)` gives — the same loaded fields, the same deferred
ones (fetched on first access, as always), the objects of `select_related` cached on their
owners, `_state.db` and `_state.adding` set — with the instance built directly. It does so
only for a model built Django's own way (`_builds_plainly`); any other model in the queryset
is built the ORM's way. A queryset using what this does not rebuild (annotations,
`prefetch_related`, `values()`, multi-table inheritance, a relation's known objects) is
simply listed by the ORM.

`load_by_id(model, ids, deferred)` goes one step further for a model whose loaded columns
need no conversion but datetimes (the dispatcher's listings): the statement is written out and
SQLite's datetimes are parsed from their text in one step.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import chain
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections, router
from django.db.models import Model, QuerySet, signals
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query import ModelIterable
from django.db.models.query_utils import DeferredAttribute
from django.utils.dateparse import parse_datetime

from common.lookups import among

M = TypeVar("M", bound=Model)

Row = Sequence[Any]


def load(queryset: QuerySet[M]) -> list[M]:
    """The instances `list(queryset)` would give, cheaper; see the module's docstring."""
    if not _plain(queryset):
        return list(queryset)
    db = queryset.db
    compiler = queryset.query.get_compiler(using=db)
    results = compiler.execute_sql(chunked_fetch=False)
    node = _node(compiler.klass_info, compiler.select, db)
    if node is None:
        # A layout this module does not rebuild (select_related into a multi-table child):
        # the ORM runs the query again, a cost only such a queryset pays.
        return list(queryset)
    build, _ = node
    return [build(row) for row in _converted(compiler, results)]


def load_by_id(
    model: type[M], ids: Collection[int], deferred: Collection[str] = ()
) -> dict[int, M]:
    """`{obj.pk: obj for obj in load(model.objects.defer(*deferred).filter(pk__in=ids))}`,
    read by a statement written out. On SQLite a datetime column is read as the UTC text it
    keeps and parsed in one step: through the ORM, the driver's converter parses it, then it
    is made aware — more than the rest of the row costs, and the dispatcher's re-fetch reads
    two for each of up to 2,000 listings a cycle. On PostgreSQL the driver already gives
    what the ORM would. Only for a model built plainly whose loaded fields the ORM converts
    nothing of on read but those datetimes (`_as_read`), and with SQLite's times kept in UTC:
    anything else is read through `load`. `deferred` names fields (or their attnames) as
    `defer` does; the primary key is always loaded."""
    names = {name for f in model._meta.concrete_fields for name in (f.name, f.attname)}
    unknown = set(deferred) - names
    if unknown:
        raise ValueError(f"{model.__name__} has no field {', '.join(sorted(unknown))}")
    fields = [
        f
        for f in model._meta.concrete_fields
        if f.primary_key or (f.name not in deferred and f.attname not in deferred)
    ]
    if not ids:
        return {}
    db = router.db_for_read(model)
    connection = connections[db]
    sqlite = connection.vendor == "sqlite"
    if (
        not _builds_plainly(model)
        or not all(_as_read(f, connection) for f in fields)
        or (sqlite and not (settings.USE_TZ and connection.timezone is dt.UTC))
    ):
        queryset = model.objects.defer(*deferred).filter(pk__in=list(ids))
        return {obj.pk: obj for obj in load(queryset)}
    quote = connection.ops.quote_name
    times = [
        position
        for position, f in enumerate(fields)
        if sqlite and f.get_internal_type() == "DateTimeField"
    ]
    columns = ", ".join(
        f"CAST({quote(f.column)} AS TEXT)" if position in times else quote(f.column)
        for position, f in enumerate(fields)
    )
    params: list[Any] = []
    where = among(quote(model._meta.pk.column), list(ids), params, connection.vendor)
    with connection.cursor() as cursor:
        # Only the model's own quoted names are formatted in; the ids are parameters.
        cursor.execute(
            f"SELECT {columns} FROM {quote(model._meta.db_table)} WHERE {where}",  # noqa: S608
            params,
        )
        rows = cursor.fetchall()
    if not rows:
        return {}
    if times:
        by_column = list(zip(*rows, strict=True))
        for position in times:
            by_column[position] = list(map(_utc_from_text, by_column[position]))
        rows = list(zip(*by_column, strict=True))
    attnames = [f.attname for f in fields]
    pk = attnames.index(model._meta.pk.attname)
    build = _plain_builder(model, attnames, db)
    return {row[pk]: build(row) for row in rows}


def _plain_builder(model: type[M], attnames: list[str], db: str) -> Callable[[Row], M]:
    """A function building an instance of `model` from the values of `attnames`, as
    `Model.from_db` would for a model built plainly (`_builds_plainly`)."""
    new = object.__new__

    def build(values: Row) -> M:
        obj = new(model)
        # What Model.__init__ leaves after setting every loaded field: a deferred field is
        # one missing from __dict__, loaded when first read.
        obj.__dict__.update(zip(attnames, values, strict=True))
        state = obj._state = ModelState()
        state.adding = False
        state.db = db
        return obj

    return build


# The field types whose value the ORM takes as the driver gives it on SQLite and PostgreSQL
# (a boolean is one for SQLite's driver too: its column type is registered), and datetimes,
# which `load_by_id` reads itself. A foreign key's is its target's.
_AS_READ = frozenset(
    {
        "AutoField",
        "BigAutoField",
        "BigIntegerField",
        "BooleanField",
        "CharField",
        "DateTimeField",
        "IntegerField",
        "PositiveBigIntegerField",
        "PositiveIntegerField",
        "PositiveSmallIntegerField",
        "SmallAutoField",
        "SmallIntegerField",
        "TextField",
    }
)


def _as_read(field: Any, connection: Any) -> bool:
    """Whether the ORM converts nothing of `field`'s value but, on SQLite, a datetime: no
    converter of the field's own (`from_db_value`, a foreign key's target's), and a type
    the backend converts at most as `_AS_READ` says."""
    target = field.target_field if field.is_relation else field
    return not field.get_db_converters(connection) and target.get_internal_type() in _AS_READ


def _utc_from_text(text: str | None) -> dt.datetime | None:
    """A datetime SQLite keeps as naive UTC text, aware. Any other text (an offset of its
    own, written by a raw statement given an aware value; a date alone) is read as Django's
    converter reads it."""
    if text is None:
        return None
    try:
        value = dt.datetime.fromisoformat(text + "+00:00")
    except ValueError:
        value = parse_datetime(text)
    # A date alone parses above too, naive: "+" is taken as the separator of a time 00:00.
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def _converted(compiler: Any, results: Iterable[list[Row]]) -> list[Row]:
    """The query's rows, each value converted as `compiler.results_iter` converts it, column
    by column rather than row by row (one loop per column instead of a call per value through
    Django's nested loops). A datetime on SQLite, which its driver already read into a naive
    UTC datetime, is made aware directly: Django's converter tests the setting, the type and
    the awareness again for each value, some 2 µs — a batch's 500 listings carry 1,000."""
    fields = [select[0] for select in compiler.select[: compiler.col_count]]
    if compiler.has_composite_fields(fields):
        return list(compiler.results_iter(results))
    rows = list(chain.from_iterable(results))
    converters = compiler.get_converters(fields)
    if not rows or not converters:
        return rows
    connection = compiler.connection
    columns = list(zip(*rows, strict=True))
    for position, (functions, expression) in converters.items():
        values = columns[position]
        for function in functions:
            values = _convert_all(function, expression, connection, values)
        columns[position] = values
    return list(zip(*columns, strict=True))


def _convert_all(function: Callable, expression: Any, connection: Any, values: Sequence) -> list:
    if _naive_utc(function, connection):
        return [
            value.replace(tzinfo=dt.UTC)
            if value.__class__ is dt.datetime and value.tzinfo is None
            else function(value, expression, connection)  # None, text, an aware datetime
            for value in values
        ]
    return [function(value, expression, connection) for value in values]


def _naive_utc(function: Callable, connection: Any) -> bool:
    """Whether `function` is SQLite's datetime converter making naive values aware in UTC."""
    if connection.vendor != "sqlite":
        return False
    # Imported here: the SQLite backend's module imports the ORM, which imports this one.
    from django.db.backends.sqlite3.operations import DatabaseOperations

    return (
        getattr(function, "__func__", None) is DatabaseOperations.convert_datetimefield_value
        and settings.USE_TZ
        and connection.timezone is dt.UTC
    )


def _plain(queryset: QuerySet) -> bool:
    query = queryset.query
    return (
        queryset._iterable_class is ModelIterable
        and not queryset._prefetch_related_lookups
        and not queryset._known_related_objects
        and not query.annotation_select
        and not query.extra_select
        and not query.combinator
    )


def _builds_plainly(model: type[Model]) -> bool:
    """Whether filling `__dict__` builds what `Model.from_db` would for `model`: Django's own
    construction (no `from_db`, `__init__` or `__setattr__` of the model's, no init signal
    receiver) and fields whose values `__init__` would store as given (a field descriptor
    that converts on assignment — a custom field's — needs `__init__`)."""
    return (
        model.from_db.__func__ is Model.from_db.__func__  # type: ignore[attr-defined]
        and model.__init__ is Model.__init__
        and model.__setattr__ is Model.__setattr__
        and not signals.pre_init.has_listeners(model)
        and not signals.post_init.has_listeners(model)
        and not model._meta.parents  # multi-table inheritance reorders the parents' columns
        and all(
            type(getattr(model, f.attname)) in _PLAIN_DESCRIPTORS
            for f in model._meta.concrete_fields
        )
    )


# What Django puts on a model class for a plain field and a foreign key's id: `__init__`
# leaves the value given in `__dict__` through either.
_PLAIN_DESCRIPTORS = (DeferredAttribute, ForeignKeyDeferredAttribute)


def _node(klass_info: dict, select: list, db: str) -> tuple[Callable[[Row], Any], int] | None:
    """A function building the instance of `klass_info` (and its `select_related` objects)
    from a row of the query, and the row's position of its primary key; None for a layout
    this module leaves to the ORM."""
    if klass_info.get("from_parent"):
        return None
    model = klass_info["model"]
    fields = klass_info["select_fields"]
    start, end = fields[0], fields[-1] + 1
    attnames = [column[0].target.attname for column in select[start:end]]
    related = []
    for info in klass_info.get("related_klass_infos", ()):
        child = _node(info, select, db)
        if child is None:
            return None
        related.append((*child, info["local_setter"], info["remote_setter"]))
    if _builds_plainly(model):
        instance = _plain_builder(model, attnames, db)
    else:

        def instance(values: Row) -> Any:
            return model.from_db(db, attnames, values)

    def build(row: Row) -> Any:
        obj = instance(row[start:end])
        for child, pk_column, local_setter, remote_setter in related:
            # As the ORM's RelatedPopulator: a LEFT JOIN that found nothing is None.
            other = child(row) if row[pk_column] is not None else None
            local_setter(obj, other)
            if other is not None:
                remote_setter(other, obj)
        return obj

    return build, start + attnames.index(model._meta.pk.attname)
