"""Helpers of the fleet test (test_fleet.py): Rakuten listings that the fake Ichiba answers
for, watches that polling will detect, qcluster processes and the worker processes of each,
and the final account of every outbox row against what the push service received."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from dataclasses import dataclass

from django.db.models import Count

from outbox.messages import dedup_key
from outbox.models import TERMINAL, Outbox, Status
from tests.fakes.ichiba import FakeIchiba
from watches.models import Device, Listing, Trigger, Watch

TARGET = 950  # every watch's target price
LOW, HIGH = 900, 1000  # the fake's prices: below the target, above it


def rakuten_listings(ichiba: FakeIchiba, count: int) -> list[Listing]:
    """`count` Rakuten listings never polled; the fake answers two in three below TARGET."""
    codes = [f"fleetshop:item{i}" for i in range(count)]
    for i, code in enumerate(codes):
        ichiba.add(code, price=HIGH if i % 3 == 0 else LOW)
    return Listing.objects.bulk_create(
        Listing(source="rakuten", item_code=code, name=f"fleet item {code}", price=HIGH)
        for code in codes
    )


def flip_price(ichiba: FakeIchiba, listing: Listing) -> None:
    """Move one item across the target at the fake: a poll or a re-fetch sees it there."""
    with ichiba.lock:
        price = ichiba.items[listing.item_code]["itemPrice"]
    ichiba.set(listing.item_code, price=HIGH if price == LOW else LOW)


def add_watches(devices: list[Device], listings: list[Listing], start: int, count: int) -> int:
    """`count` new target-price watches, spread over devices and listings from `start` on:
    the next poll of a listing below the target enqueues one row for each."""
    Watch.objects.bulk_create(
        Watch(
            device=devices[(start + i) % len(devices)],
            listing=listings[(start * 7 + i) % len(listings)],
            trigger=Trigger.TARGET_PRICE,
            target_price=TARGET,
        )
        for i in range(count)
    )
    return start + count


def session_pids(leader: subprocess.Popen) -> set[int]:
    """The processes of a cluster (started in a session of its own): its sentinel, pusher,
    monitor and workers — the pids its dispatch cycles carry in their holder token."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == leader.pid:
                    pids.add(int(entry))
            except OSError:  # gone meanwhile
                continue
    return pids


@dataclass
class Account:
    """Every outbox row against the deliveries the push service accepted."""

    rows: int
    by_status: Counter[str]
    deliveries: int
    duplicates: int  # deliveries beyond the first of one row (one tag: at most one live row)
    lost: int  # rows sent without a delivery, or not terminal
    unexplained: int  # deliveries of rows that are not `sent`, or of no row at all
    no_reason: int  # rows dropped or failed without a reason


def account(delivered: Counter[str]) -> Account:
    rows = list(Outbox.objects.only("watch_id", "trigger", "detected_at", "status", "reason"))
    by_status = Counter(row.status for row in rows)
    sent_tags = {dedup_key(row) for row in rows if row.status == Status.SENT}
    lost = sum(1 for tag in sent_tags if delivered[tag] == 0)
    lost += sum(1 for row in rows if row.status not in TERMINAL)
    return Account(
        rows=len(rows),
        by_status=by_status,
        deliveries=sum(delivered.values()),
        duplicates=sum(n - 1 for n in delivered.values() if n > 1),
        lost=lost,
        unexplained=sum(n for tag, n in delivered.items() if tag not in sent_tags),
        no_reason=sum(
            1 for row in rows if row.status in (Status.DROPPED, Status.FAILED) and not row.reason
        ),
    )


def open_rows() -> int:
    """Rows not yet terminal (pending, sending or waiting to retry)."""
    return Outbox.objects.exclude(status__in=list(TERMINAL)).count()


def reasons() -> dict[str, int]:
    """Dropped and failed rows by reason."""
    counts = (
        Outbox.objects.filter(status__in=[Status.DROPPED, Status.FAILED])
        .values("reason")
        .annotate(n=Count("id"))
    )
    return {c["reason"]: c["n"] for c in counts}
