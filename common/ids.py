"""A row's id as a person types it in a query string or a search box."""

from __future__ import annotations

# The largest id of a 64-bit column (Django's BigAutoField, and any AutoField below it).
MAX_ID = 2**63 - 1


def typed_id(text: str) -> int | None:
    """The id `text` names: ASCII digits only (`"²".isdigit()` is true too, and `int("²")`
    raises), within a 64-bit id (a larger number overflows SQLite's integer), else None."""
    if not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if number <= MAX_ID else None
