"""Classes named in settings by import path: the marketplace adapters
(`MARKETPLACE_ADAPTERS`) and the delivery channels (`OUTBOX_CHANNEL_CLASSES`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string


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
