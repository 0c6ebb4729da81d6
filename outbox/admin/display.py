"""How the outbox admin shows values: JSON with its times in the service's zone, links to
other admin pages, compact times for list columns."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from typing import Any

from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import get_language

# The keys an attempt's event data may hold, in the order a person reads them.
ATTEMPT_KEYS = (
    "fresh",
    "value",
    "line",
    "message",
    "fetch_error",
    "delivery_error",
    "status_code",
    "detail",
)
# Only strings that start like an ISO 8601 date and time are tried as one.
_ISO_MOMENT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def in_local_time(value: Any) -> Any:
    """`value` with every aware date-time in it — a datetime, or an ISO 8601 string as JSON
    stores them (in UTC) — written in the current zone (Asia/Tokyo), like every other time
    the admin shows. Naive times are left alone: their zone is unknown."""
    if isinstance(value, dict):
        return {key: in_local_time(item) for key, item in value.items()}
    if isinstance(value, list):
        return [in_local_time(item) for item in value]
    moment = value
    if isinstance(value, str) and _ISO_MOMENT.match(value):
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(moment, dt.datetime) and moment.tzinfo is not None:
        return timezone.localtime(moment).isoformat()
    return value


def pretty_json(value: Any) -> str:
    """Indented JSON for people: attempt keys first, times in the local zone."""
    if value is None:
        return ""
    if isinstance(value, dict):
        known = {key: value[key] for key in ATTEMPT_KEYS if key in value}
        value = {**known, **{key: v for key, v in value.items() if key not in known}}
    return json.dumps(in_local_time(value), indent=2, ensure_ascii=False, default=str)


def json_block(value: Any) -> str:
    return format_html('<pre class="ob-json">{}</pre>', pretty_json(value))


def admin_link(obj: Any, text: Any, *, title: str = "") -> str:
    """A link to `obj`'s admin page, or a dash when there is no object."""
    if obj is None:
        return "—"
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    if title:
        return format_html('<a href="{}" title="{}">{}</a>', url, title, text)
    return format_html('<a href="{}">{}</a>', url, text)


def compact_time(moment: dt.datetime | None) -> str:
    """Local time for a list column, month-day and minutes; the full one is the tooltip."""
    if moment is None:
        return "—"
    full = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")
    return format_html('<span class="ob-when" title="{}">{}</span>', full, full[5:16])


def choice_label(choices: type[models.Choices], value: str) -> str:
    """The label of `value` in the current language: a list page shows the same few labels
    hundreds of times, so each is translated once per language."""
    return _choice_label(choices, value, get_language())


@functools.lru_cache(maxsize=1024)
def _choice_label(choices: type[models.Choices], value: str, language: str | None) -> str:
    try:
        return str(choices(value).label)
    except ValueError:  # a value outside the vocabulary is shown as it is
        return value


def full_time(moment: dt.datetime) -> str:
    """Local time to the second: a retry story happens within minutes."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")
