"""django-q2 entry points. Thin: each calls plain functions."""

from __future__ import annotations

from django.conf import settings

from watches.polling import poll as poll_listings


def poll() -> dict[str, int]:
    """Schedule `watches-poll`, every POLL_MINUTES: the listings due for polling."""
    return poll_listings(max_seconds=settings.POLL_MAX_SECONDS).as_json()
