"""Reading PostgreSQL `timestamptz` values with psycopg's C parser.

Django registers its own loader for `timestamptz` on every psycopg 3 connection, a Python
subclass of psycopg's *Python* loader (to give the connection's time zone): each value is then
matched by a regular expression and built in Python, some 5 µs — 2,000 listings' two
datetimes cost a dispatch cycle more than reading their rows (`bench/bench_dispatch.py` on
PostgreSQL: loading a batch of 500 listings took 15.6 ms, 7.9 ms with this).

psycopg's C loader (the `psycopg[binary]` wheel) gives the same datetime in the connection's
time zone. Django sets that zone to its own when it connects (UTC here), so where the two
agree this loader hands each value to the C parser. It carries the `timezone` Django checks
when it opens a cursor: were it missing or different, Django would register its loader again
on every cursor. Anywhere else — another zone, no C module, `USE_TZ` off — Django's loader
stays."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings

try:
    from psycopg import adapt
    from psycopg._cmodule import _psycopg
except ImportError:  # no psycopg, or no C module: Django's loader stays
    adapt = _psycopg = None


def install(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created` receiver: on a psycopg connection whose time zone is UTC, as
    Django's, timestamps are parsed in C."""
    if connection.vendor != "postgresql" or _psycopg is None or not settings.USE_TZ:
        return
    if connection.timezone is not dt.UTC:
        return
    # The zone the server reports is the one the C loader gives; Django has set it by now.
    if connection.connection.info.parameter_status("TimeZone") != "UTC":
        return
    connection.connection.adapters.register_loader("timestamptz", _UtcTimestampLoader)


if _psycopg is not None:

    class _UtcTimestampLoader(adapt.Loader):
        # What Django compares with its own time zone before each cursor (see above).
        timezone = dt.UTC

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            # The C loader cannot be subclassed; its bound `load` is put in place of this
            # class's, so psycopg calls the C function for each value.
            self.load = _psycopg.TimestamptzLoader(oid, context).load  # type: ignore[method-assign]

        def load(self, data: Any) -> dt.datetime:  # replaced per instance in __init__
            raise NotImplementedError
