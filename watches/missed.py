"""What we would have told a device that could not be reached.

A watch whose device has notifications off is still judged at every poll. When its trigger
holds, no outbox row is made — the dispatcher could only drop it (`no_subscription`), and a
dropped row does not hold the day's slot, so every poll would make and drop another. Instead
the watch keeps its latest missed detection (`missed_price`, `missed_at`), and the history
page says "we would have told you: ¥520 on 12/1 — notifications are off".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from django.db.models import F, Q, QuerySet

from watches.models import Device, Watch


class ObservationLike(Protocol):
    @property
    def effective_price(self) -> int | None: ...
    @property
    def net_price(self) -> int | None: ...
    @property
    def observed_at(self) -> dt.datetime: ...


def record_missed(missed: Iterable[tuple[Watch, ObservationLike]]) -> int:
    """Remember each (watch, observation) as the watch's missed detection — at the price it
    compares (after points for a watch after points). The time is the first time it was
    seen at this price since the watch was last told: an unchanged price, poll after poll,
    writes nothing, but a miss at the price of one a notification has since made old news
    is news again. Returns how many watches changed."""
    changed = 0
    for watch, observation in missed:
        price = observation.net_price if watch.after_points else observation.effective_price
        if price is None:
            continue
        changed += (
            Watch.objects.filter(pk=watch.pk)
            .filter(
                Q(missed_price__isnull=True)
                | ~Q(missed_price=price)
                | Q(last_notified_at__gte=F("missed_at"))
            )
            .update(missed_price=price, missed_at=observation.observed_at)
        )
    return changed


@dataclass(frozen=True)
class Missed:
    """One "we would have told you" line of the history page."""

    watch: Watch
    price: int
    at: dt.datetime


def missed_for(device: Device | None) -> list[Missed]:
    """The device's live watches with a missed detection that no notification delivered
    since has made old news, newest first."""
    if device is None:
        return []
    watches: QuerySet[Watch] = (
        Watch.live.filter(device=device, missed_at__isnull=False, missed_price__isnull=False)
        .filter(Q(last_notified_at__isnull=True) | Q(last_notified_at__lt=F("missed_at")))
        .select_related("listing")
        .order_by("-missed_at", "-id")
    )
    return [
        Missed(watch, watch.missed_price, watch.missed_at)
        for watch in watches
        # Never None (the query's filter): said again for the type checker.
        if watch.missed_price is not None and watch.missed_at is not None
    ]
