"""django-q2 entry points. Thin: each calls one plain function."""

from __future__ import annotations

from outbox.dispatch import run_cycle
from outbox.retention import purge


def dispatch() -> dict[str, int]:
    """Schedule `outbox-dispatch`, every minute."""
    return run_cycle().as_json()


def retention() -> dict[str, int]:
    """Schedule `outbox-retention`, daily."""
    return purge().as_json()
