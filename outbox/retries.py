"""When a row that did not go out is tried again, and when it has had its last try."""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from common.retry_after import MAX_SECONDS


def backoff(retry_count: int, retry_after: float | None = None) -> dt.timedelta:
    """min(2**retry_count * 30 s, 30 min), or the server's Retry-After when that is longer
    (at most a day: the row stays alive)."""
    base = settings.OUTBOX_BACKOFF_BASE_SECONDS
    delay = min(base * 2**retry_count, settings.OUTBOX_BACKOFF_CAP_SECONDS)
    if retry_after is not None and retry_after > delay:
        delay = min(retry_after, MAX_SECONDS)
    return dt.timedelta(seconds=delay)


def used_every_retry(retry_count: int) -> bool:
    """A row that already used OUTBOX_MAX_RETRY retries goes to `failed` instead of `retry`."""
    return retry_count >= settings.OUTBOX_MAX_RETRY
