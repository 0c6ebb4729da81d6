"""django-q2 entry points. Thin: each calls plain functions."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.cache import caches

from watches.polling.poll import poll as poll_listings
from watches.products.polling import poll_products

POLL_LOCK = "watches-poll-running"


def poll() -> dict[str, int]:
    """Schedule `watches-poll`, every POLL_EVERY_MINUTES: the products due on a marketplace
    without a budget (every shop's offer in one request each), then what the poll plan
    chooses within each budget — items, shops' feeds, products' offers.

    A run may outlast the interval (products first, then each marketplace's batches in turn,
    the last batch started before POLL_MAX_SECONDS): the next run then does nothing rather
    than plan the same due listings again and spend the budget twice. The guard expires with
    the task's timeout, so a killed run holds it no longer than django-q2 would."""
    locks = caches["locks"]
    token = uuid.uuid4().hex
    if not locks.add(POLL_LOCK, token, timeout=settings.Q_CLUSTER["timeout"]):
        return {"skipped": 1}
    try:
        result = poll_products(planned=True)
        result.add(poll_listings(max_seconds=settings.POLL_MAX_SECONDS))
        return result.as_json()
    finally:
        if locks.get(POLL_LOCK) == token:
            locks.delete(POLL_LOCK)
