"""A dispatcher process SIGKILLed at random moments leaves nothing stuck: once its lease has
expired and another cycle has run, every row is terminal. A row it had delivered but not yet
recorded is delivered again — the only duplicates there may be — and both copies carry the
same Topic and tag, so the push service and the device collapse them: also when, by the
re-send, the rows that go out with it have changed (after the kill one item's price rises
past its watches' line, so their rows are dropped on the re-check, and the digests they
were in go out again without them), because a row goes out again in the form it went out
in (`outbox.digests.plan`)."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import time
from collections import Counter

import pytest
import time_machine
from django.utils import timezone

from demo.market import set_product
from outbox.dispatch import run_cycle
from outbox.messages import dedup_key
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.reliability.world import (
    child_env,
    demo_listings,
    due_rows,
    not_terminal,
    start_dispatcher,
    statuses,
    subscribed_devices,
    wait_for,
)
from watches.models import Listing

LEASE_SECONDS = 10
# The lease's floor is 2 × the longest delivery + 5 s: timeouts that let a 10 s lease start.
TIMEOUTS = {"WEBPUSH_CONNECT_TIMEOUT": 1, "WEBPUSH_READ_TIMEOUT": 1.5, "EMAIL_TIMEOUT": 2.5}


@pytest.mark.django_db(transaction=True)
def test_sigkilled_dispatchers_leave_nothing_stuck_and_duplicate_only_what_they_did_not_record(
    push_service, full, figures, tmp_path, settings
):
    runs, per_run = (20, 100) if full else (3, 100)
    settings.OUTBOX_LEASE_SECONDS = LEASE_SECONDS
    for name, value in TIMEOUTS.items():
        setattr(settings, name, value)
    push_service.delay = 0.01  # a delivery takes a moment: kills land mid-send too
    devices = subscribed_devices(push_service, 10)
    # Seven items for ten devices: each device's rows spread over every item, so the item
    # whose price rises after a kill takes some rows out of a digest, not all of them.
    listings = demo_listings(7)
    env = child_env(OUTBOX_LEASE_SECONDS=LEASE_SECONDS, OUTBOX_BATCH_SIZE=20, **TIMEOUTS)
    rng = random.Random(int(os.environ.get("RELIABILITY_SEED", "6")))
    totals: Counter[str] = Counter()

    for run in range(runs):
        rows = due_rows(devices, listings, per_run)
        go, ready = tmp_path / f"go-{run}", tmp_path / f"ready-{run}"
        proc = start_dispatcher(env, tmp_path, f"killed-{run}", ready=ready, go=go)
        wait_for([ready], [proc], timeout=60)
        # Killed after a random number of its pushes (and a moment more): however slow the
        # machine, the kill lands anywhere from before the first delivery to after the
        # last, mid-batch included.
        pushed = len(push_service.accepted())
        go.touch()
        _wait_for_pushes(push_service, pushed + rng.randint(0, 12), proc)
        time.sleep(rng.uniform(0, 0.05))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        stuck = Outbox.objects.filter(id__in=rows, status=Status.SENDING).count()
        # One item's price rises past the line: its rows not yet recorded are dropped on
        # the re-check, and the digests they were in go out again without them.
        risen = listings[run % len(listings)]
        set_product(risen.item_code, price=1000)

        # The lease expires (and the killed process's answers grow too old to reuse);
        # cycles in this process recover and finish the rows.
        later = timezone.now() + dt.timedelta(
            seconds=LEASE_SECONDS + settings.OUTBOX_REFETCH_MAX_AGE + 1
        )
        with time_machine.travel(later, tick=True) as clock:
            recovered = 0
            for _ in range(10):
                recovered += run_cycle().recovered
                if not not_terminal(rows):
                    break
                clock.shift(dt.timedelta(minutes=31))

        found = _check_run(push_service, rows, killed_pid=proc.pid, risen=risen.pk)
        totals.update(rows=per_run, stuck_at_kill=stuck, recovered=recovered, **found)
        # The next run starts from the market as it was, polled a while ago (the cycles
        # above ran in the future and kept what they saw there).
        set_product(risen.item_code, price=900)
        Listing.objects.filter(pk__in=[item.pk for item in listings]).update(
            price=900, last_polled_at=timezone.now() - dt.timedelta(minutes=2)
        )

    figures(
        "crash",
        runs=runs,
        rows=totals["rows"],
        deliveries=totals["deliveries"],
        told=totals["told"],
        duplicates=totals["duplicates"],
        collapsible=totals["collapsible"],
        resent_with_other_rows=totals["other_rows"],
        dropped_after_the_kill=totals["dropped"],
        lost=totals["lost"],
        terminal=f"{totals['terminal']}/{totals['rows']}",
        sending_at_kill=totals["stuck_at_kill"],
        recovered=totals["recovered"],
    )
    assert totals["lost"] == 0
    assert totals["terminal"] == totals["rows"]
    assert totals["collapsible"] == totals["duplicates"], "every duplicate collapsible"


def _wait_for_pushes(push_service, count: int, proc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(push_service.accepted()) < count and proc.poll() is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.002)


def _check_run(push_service, rows: list[int], *, killed_pid: int, risen: int) -> dict[str, int]:
    assert not_terminal(rows) == 0, statuses(rows)
    outcomes = Counter(Outbox.objects.filter(id__in=rows).values_list("status", "reason"))
    dropped = outcomes.pop((Status.DROPPED, Reason.CONDITION_LOST), 0)
    assert outcomes == Counter({(Status.SENT, Reason.DELIVERED): len(rows) - dropped})
    assert not Outbox.objects.filter(id__in=rows, status=Status.DROPPED).exclude(
        watch__listing_id=risen
    ), "only the rows of the item whose price rose are dropped"
    keys = {dedup_key(row): row.pk for row in Outbox.objects.filter(id__in=rows)}
    sent = set(Outbox.objects.filter(id__in=rows, status=Status.SENT).values_list("id", flat=True))
    # Each push tells one row, or several (a digest): count rows told, by their dedup key.
    copies = [r for r in push_service.accepted() if set(r.tags) & keys.keys()]
    per_key = Counter(key for r in copies for key in r.tags if key in keys)
    lost = len([row_id for key, row_id in keys.items() if row_id in sent and not per_key[key]])
    duplicated = [key for key, n in per_key.items() if n > 1]
    collapsible = other_rows = 0
    for key in duplicated:
        row_id = keys[key]
        assert per_key[key] == 2, f"row {row_id} delivered {per_key[key]} times"
        told = [r for r in copies if key in r.tags]
        # The push service replaces an undelivered copy with the same Topic, the browser a
        # shown one with the same tag: the person sees the row once.
        if len({(r.topic, r.tag) for r in told}) == 1:
            collapsible += 1
        if len({tuple(sorted(r.tags)) for r in told}) > 1:
            other_rows += 1  # the digest it went out in again told other rows than the first
        # The first copy came from the killed process: it claimed the row, and its lease
        # expired before it recorded anything.
        story = list(
            OutboxEvent.objects.filter(outbox_id=row_id)
            .order_by("id")
            .values_list("to_status", "reason", "actor")
        )
        first_claim = next(actor for to, reason, actor in story if reason == Reason.CLAIMED)
        assert first_claim.split(":")[1] == str(killed_pid), story
        assert (Status.RETRY, Reason.LEASE_EXPIRED) in [(to, reason) for to, reason, _ in story]
        # Its delivery had started: the takeover said so, and the row keeps the mark.
        expired = OutboxEvent.objects.get(outbox_id=row_id, reason=Reason.LEASE_EXPIRED)
        assert expired.data is not None
        assert expired.data.get("may_have_been_delivered") is True, expired.data
        assert Outbox.objects.get(pk=row_id).maybe_delivered
        sent_by = [actor for to, _, actor in story if to == Status.SENT]
        assert len(sent_by) == 1 and sent_by[0].split(":")[1] != str(killed_pid), story
    return {
        "deliveries": len(copies),
        "told": sum(per_key.values()),
        "duplicates": len(duplicated),
        "collapsible": collapsible,
        "other_rows": other_rows,
        "dropped": dropped,
        "lost": lost,
        "terminal": len(rows) - not_terminal(rows),
    }
