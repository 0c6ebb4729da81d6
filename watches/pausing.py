"""Pausing listings: staff stop tracking them, and whoever holds work for them is told.

Polling skips a paused listing and the dispatcher drops its notifications when it reaches
them; `listings_paused` lets the outbox drop them at once, with the staff user's name, without
`watches` knowing about the outbox (`watches.services.listings_paused`: the outbox connects
its receiver when it starts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils import timezone

from watches import services
from watches.models import Listing


@dataclass
class PauseResult:
    paused: int  # listings that were not paused before
    reports: list[str] = field(default_factory=list)  # what the receivers did, for staff


def pause_listings(
    listing_ids: Iterable[int], *, actor: str, now: dt.datetime | None = None
) -> PauseResult:
    """Pause the listings and tell the receivers of `listings_paused` — also for listings
    already paused, so pausing again settles whatever was enqueued since (idempotent)."""
    listing_ids = list(listing_ids)
    paused = services.pause_listings(listing_ids)
    responses = services.listings_paused.send(
        sender=Listing, listing_ids=listing_ids, actor=actor, now=now or timezone.now()
    )
    return PauseResult(paused, [str(answer) for _, answer in responses if answer is not None])
