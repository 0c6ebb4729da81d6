"""A dispatcher process SIGKILLed at random moments leaves nothing stuck: once its lease has
expired and another cycle has run, every row is terminal. A row it had delivered but not yet
recorded is delivered again — the only duplicates there may be — and both copies carry the
same Topic and tag, so the push service and the device collapse them."""

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

from outbox.dispatch import run_cycle
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
    listings = demo_listings(5)
    env = child_env(OUTBOX_LEASE_SECONDS=LEASE_SECONDS, OUTBOX_BATCH_SIZE=20, **TIMEOUTS)
    rng = random.Random(int(os.environ.get("RELIABILITY_SEED", "6")))
    totals: Counter[str] = Counter()

    for run in range(runs):
        rows = due_rows(devices, listings, per_run)
        go, ready = tmp_path / f"go-{run}", tmp_path / f"ready-{run}"
        proc = start_dispatcher(env, tmp_path, f"killed-{run}", ready=ready, go=go)
        wait_for([ready], [proc], timeout=60)
        go.touch()
        time.sleep(rng.uniform(0.05, 0.5))  # 100 rows take ~0.6 s here
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        stuck = Outbox.objects.filter(id__in=rows, status=Status.SENDING).count()

        # The lease expires; cycles in this process recover and finish the rows.
        later = timezone.now() + dt.timedelta(seconds=LEASE_SECONDS + 1)
        with time_machine.travel(later, tick=True) as clock:
            recovered = 0
            for _ in range(10):
                recovered += run_cycle().recovered
                if not not_terminal(rows):
                    break
                clock.shift(dt.timedelta(minutes=31))

        found = _check_run(push_service, rows, killed_pid=proc.pid)
        totals.update(rows=per_run, stuck_at_kill=stuck, recovered=recovered, **found)

    figures(
        "crash",
        runs=runs,
        rows=totals["rows"],
        deliveries=totals["deliveries"],
        told=totals["told"],
        duplicates=totals["duplicates"],
        resent_in_other_form=totals["other_form"],
        lost=totals["lost"],
        terminal=f"{totals['terminal']}/{totals['rows']}",
        sending_at_kill=totals["stuck_at_kill"],
        recovered=totals["recovered"],
    )
    assert totals["lost"] == 0
    assert totals["terminal"] == totals["rows"]


def _check_run(push_service, rows: list[int], *, killed_pid: int) -> dict[str, int]:
    assert not_terminal(rows) == 0, statuses(rows)
    assert statuses(rows) == Counter({Status.SENT: len(rows)})
    tags = dict(Outbox.objects.filter(id__in=rows).values_list("sent_message__tag", "id"))
    # Each push tells one row, or several (a digest): count rows told, by their dedup key.
    copies = [r for r in push_service.accepted() if set(r.tags) & tags.keys()]
    per_tag = Counter(tag for r in copies for tag in r.tags if tag in tags)
    lost = len(tags) - len(per_tag)
    duplicated = [tag for tag, n in per_tag.items() if n > 1]
    other_form = 0
    for tag in duplicated:
        row_id = tags[tag]
        assert per_tag[tag] == 2, f"row {row_id} delivered {per_tag[tag]} times"
        told = [r for r in copies if tag in r.tags]
        if len({r.is_digest for r in told}) == 1:
            # Sent again in the same form (alone, or in a digest): one Topic and tag, so the
            # push service and the browser collapse the copies.
            assert len({(r.topic, r.tag) for r in told}) == 1, "copies differ in Topic"
        else:
            # Alone once and in a digest once (the rows due together changed): both shown,
            # the row's story says it may have been delivered (below; decision 0018).
            other_form += 1
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
        "told": sum(per_tag.values()),
        "duplicates": len(duplicated),
        "other_form": other_form,
        "lost": lost,
        "terminal": len(rows) - not_terminal(rows),
    }
