"""Classes named in settings by import path: the marketplace adapters
(`MARKETPLACE_ADAPTERS`) and the delivery channels (`OUTBOX_CHANNEL_CLASSES`)."""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

log = logging.getLogger("common.registry")


@cache
def _imported(path: str) -> Any:
    return import_string(path)


def configured_instance(setting: str, key: str, *, what: str) -> Any:
    """A new instance of the class that `settings.<setting>[key]` names by its import path.
    The setting is read on every call (tests and staff may change it); each path is imported
    once. Raises LookupError, naming `what` and the setting, when nothing is configured for
    `key`."""
    try:
        path = getattr(settings, setting)[key]
    except KeyError:
        raise LookupError(f"no {what} configured for {key!r} (settings.{setting})") from None
    return _imported(path)()


def import_all(setting: str) -> None:
    """Import every class `settings.<setting>` names, once: what a long-lived worker does
    before its first task (`common.longlived`), so that the first delivery or fetch does not
    pay for a library's import (pywebpush and what it brings took some 0.3 CPU seconds, a
    twentieth of a 2,000-row cycle over four dispatchers). A path that does not import is
    logged and left for its first use, which reports it where it is used: a worker must not
    fail to start over one misconfigured channel."""
    for key, path in getattr(settings, setting).items():
        try:
            _imported(path)
        except ImportError:
            log.warning("settings.%s[%r] = %r does not import", setting, key, path)
