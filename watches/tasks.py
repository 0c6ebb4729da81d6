"""django-q2 entry points. Thin: each calls plain functions."""

from __future__ import annotations

from django.conf import settings

from watches.polling import poll as poll_listings
from watches.product_polling import poll_products


def poll() -> dict[str, int]:
    """Schedule `watches-poll`, every POLL_EVERY_MINUTES: the products due (every shop's offer in
    one request each), then the listings due — offers just observed are not due again."""
    result = poll_products()
    result.add(poll_listings(max_seconds=settings.POLL_MAX_SECONDS))
    return result.as_json()
