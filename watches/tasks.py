"""django-q2 entry points. Thin: each calls plain functions."""

from __future__ import annotations

from django.conf import settings

from watches import demo
from watches.polling import poll as poll_listings


def poll() -> dict[str, int]:
    """Schedule `watches-poll`, every POLL_MINUTES: the listings due for polling."""
    return poll_listings(max_seconds=settings.POLL_MAX_SECONDS).as_json()


def demo_tick() -> dict[str, int]:
    """Schedule `demo-tick` (only with DEMO_TICK): look at the demo market, then move it.

    Looking first means every detection meets a market that has moved once more by the time
    the dispatcher re-checks it, as a real one does between a poll and a send: some sales
    will have ended, some items sold out, and the outbox shows drops beside sends.
    """
    counts = poll_listings(source="demo", force=True).as_json()
    counts["moves"] = len(demo.tick())
    return counts
