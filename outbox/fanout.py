"""How many dispatch cycles one tick of the `outbox-dispatch` schedule runs: OUTBOX_DISPATCHERS
on PostgreSQL, where claims hand concurrent dispatchers disjoint rows and each qcluster
worker (of any host) can take one; one on SQLite, which has a single writer.

The schedule's task runs a cycle itself and queues the others as ordinary tasks, so the
broker hands them to whichever workers are free — another host's as readily as this one's.
The lease, the fence and the per-watch in-flight guard are what make them safe side by side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

if TYPE_CHECKING:
    from django_q.brokers import Broker

EXTRA_TASK = "outbox.tasks.dispatch_extra"
# Apart from the schedule's own group, so its runs stay countable on their own.
GROUP = "outbox-dispatch-extra"


def dispatchers() -> int:
    """How many cycles a tick runs on this database."""
    if connection.vendor != "postgresql":
        return 1
    return settings.OUTBOX_DISPATCHERS


def fan_out(broker: Broker | None = None) -> int:
    """Queue the tick's other cycles (on the cluster's broker unless one is given); returns
    how many were queued."""
    from django_q.tasks import async_task

    extra = dispatchers() - 1
    for _ in range(extra):
        async_task(EXTRA_TASK, group=GROUP, broker=broker)
    return extra
