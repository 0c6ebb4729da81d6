"""When a process hands its counts to the shared rows, and the one count made from a signal.

- after every web request (`request_finished`): levers and intake count there;
- after every django-q2 task, in the worker that ran it (dispatch cycles, polling runs);
- at exit (management commands such as `dispatch_outbox`, `poll_prices`).
"""

from __future__ import annotations

import atexit

from django.core.signals import request_finished
from django.db.models.signals import post_save

from common import counters
from monitoring import store


def _flush(**kwargs) -> None:
    if counters.has_pending():
        store.flush()


def _cycle_recorded(sender, instance, created: bool, **kwargs) -> None:
    """Every dispatch cycle ends by writing its DispatchRun: that row's times are its
    duration, so the dispatcher needs no call of its own."""
    if created and instance.finished_at and instance.started_at:
        counters.observe_dispatch_cycle(
            (instance.finished_at - instance.started_at).total_seconds()
        )


def connect() -> None:
    from django_q.signals import post_execute_in_worker

    from outbox.models import DispatchRun

    request_finished.connect(_flush, dispatch_uid="monitoring-flush-request")
    post_execute_in_worker.connect(_flush, dispatch_uid="monitoring-flush-task")
    post_save.connect(_cycle_recorded, sender=DispatchRun, dispatch_uid="monitoring-cycle")
    atexit.register(_flush)
