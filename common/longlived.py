"""Keeping the cyclic garbage collector off what a long-lived process loads once.

A django-q2 worker loads Django, the apps and the modules its tasks need once: some 70,000
objects, which every full collection of the oldest generation walks again — in a dispatcher,
once every two or three cycles, 60–80 ms each (a dispatch cycle of 2,000 rows takes about a
second; measured with `gc.callbacks` in bench_dispatch's world). `gc.freeze()` moves them into
a permanent generation that no collection walks (full collections then took 2–9 ms). They are
still freed by reference counting; only cyclic garbage among them would be kept, and a
collection right before the freeze leaves none."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterable
from functools import partial


def freeze_loaded(modules: Iterable[str] = (), registries: Iterable[str] = ()) -> int:
    """Import `modules` (what the process will run) and the classes each setting of
    `registries` names (`common.registry`: the channels a dispatcher delivers through, the
    marketplace adapters a poll asks), collect, and freeze everything tracked so far. Returns
    how many objects are frozen in all. Safe to call more than once: each call freezes what
    was loaded since."""
    from common.registry import import_all

    for name in modules:
        importlib.import_module(name)
    for setting in registries:
        import_all(setting)
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def freeze_at_spawn(module: str, registries: Iterable[str] = ()) -> None:
    """Have every django-q2 worker import `module` (an app's tasks) and the classes named by
    `registries`, and freeze what it loaded, when it is spawned — before its first task."""
    from django_q.signals import post_spawn

    receiver = partial(_freeze_on_spawn, module, tuple(registries))
    post_spawn.connect(receiver, dispatch_uid=f"freeze-at-spawn-{module}", weak=False)


def _freeze_on_spawn(
    module: str, registries: tuple[str, ...], sender: object, **kwargs: object
) -> None:
    freeze_loaded([module], registries)
