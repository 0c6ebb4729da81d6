"""django-q2 entry points. Thin: each calls one plain function."""

from __future__ import annotations

from typing import TYPE_CHECKING

from outbox.dispatch import run_cycle
from outbox.fanout import fan_out
from outbox.retention import purge

if TYPE_CHECKING:
    from django_q.brokers import Broker


def dispatch(broker: Broker | None = None) -> dict[str, int]:
    """Schedule `outbox-dispatch`, every minute: queues the tick's other cycles (PostgreSQL,
    OUTBOX_DISPATCHERS in all) and runs one."""
    fan_out(broker)
    return run_cycle().as_json()


def dispatch_extra() -> dict[str, int]:
    """One of the cycles `dispatch` queued beside its own."""
    return run_cycle().as_json()


def retention() -> dict[str, int]:
    """Schedule `outbox-retention`, daily."""
    return purge().as_json()
