"""E-mail rows under a SIGKILLed dispatcher: a real SMTP server on 127.0.0.1 takes the mail,
the dispatcher process is killed at random moments, and once its lease has expired every row
is terminal — none lost; a row it had mailed but not recorded is mailed again, and both
copies carry the row's one `Message-ID`, so a mail client folds them — or, when the digest it
goes out in again tells other rows than the first, the second answers the first
(In-Reply-To), so a mail client shows it in that thread."""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import secrets
import signal
import time
from collections import Counter, defaultdict

import pytest
import time_machine
from django.utils import timezone

from demo.market import set_product
from outbox.digests import digest_id
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, Status
from tests.reliability.world import (
    child_env,
    demo_listings,
    not_terminal,
    start_dispatcher,
    statuses,
    wait_for,
)
from watches.models import Channel, Device, Listing, NotifyVia, Trigger, Watch

# The lease's floor is 2 × the longest delivery (here the 5 s SMTP timeout) + 5 s.
LEASE_SECONDS = 15
TIMEOUTS = {"WEBPUSH_CONNECT_TIMEOUT": 1, "WEBPUSH_READ_TIMEOUT": 1.5}
DEVICES = LISTINGS = 10  # every row a distinct (address, listing): a mail names its row


def email_devices(count: int) -> list[Device]:
    return Device.objects.bulk_create(
        Device(
            token_hash=secrets.token_hex(32),
            channel=Channel.CONSOLE,
            notify_via=NotifyVia.EMAIL,
            email=f"rel{i}-{secrets.token_hex(3)}@mail.example",
            email_confirmed_at=timezone.now(),
            language="en",
        )
        for i in range(count)
    )


def email_rows(devices, listings) -> dict[tuple[str, int], int]:
    """One due e-mail row per (device, listing) pair. Returns (address, listing id) → row."""
    watches = Watch.objects.bulk_create(
        Watch(device=d, listing=item, trigger=Trigger.TARGET_PRICE, target_price=950)
        for d in devices
        for item in listings
    )
    now = timezone.now()
    assert enqueue_many(
        Detection(w.pk, w.device_id, Channel.EMAIL, w.trigger, now, {"price": 900, "line": "950"})
        for w in watches
    ) == len(watches)
    address = {d.pk: d.email for d in devices}
    return {
        (address[device_id], listing_id): row_id
        for row_id, device_id, listing_id in Outbox.objects.filter(
            watch__in=[w.pk for w in watches]
        ).values_list("id", "device_id", "watch__listing_id")
    }


def _wait_for_mails(smtp_server, count: int, proc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(smtp_server.messages()) < count and proc.poll() is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.002)


@pytest.mark.django_db(transaction=True)
def test_sigkilled_dispatcher_loses_no_mail_and_duplicates_carry_the_same_message_id(
    smtp_server, full, figures, tmp_path, settings
):
    runs = 10 if full else 2
    settings.OUTBOX_LEASE_SECONDS = LEASE_SECONDS
    settings.EMAIL_TIMEOUT = 5
    for name, value in TIMEOUTS.items():
        setattr(settings, name, value)
    smtp_server.delay = 0.005
    devices, listings = email_devices(DEVICES), demo_listings(LISTINGS)
    env = child_env(
        OUTBOX_LEASE_SECONDS=LEASE_SECONDS,
        OUTBOX_BATCH_SIZE=20,
        EMAIL_URL=f"smtp://127.0.0.1:{smtp_server.port}?timeout=5",
        **TIMEOUTS,
    )
    rng = random.Random(int(os.environ.get("RELIABILITY_SEED", "7")))
    totals: Counter[str] = Counter()

    for run in range(runs):
        smtp_server.clear()
        rows = email_rows(devices, listings)
        go, ready = tmp_path / f"go-{run}", tmp_path / f"ready-{run}"
        proc = start_dispatcher(env, tmp_path, f"killed-{run}", ready=ready, go=go)
        wait_for([ready], [proc], timeout=60)
        # Killed after a random number of its mails (and a moment more): mid-batch too,
        # however slow the machine.
        go.touch()
        _wait_for_mails(smtp_server, rng.randint(0, 3), proc)
        time.sleep(rng.uniform(0, 0.05))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # One item's price rises past the line: its rows not yet recorded are dropped on the
        # re-check, and the digests they were in are mailed again without them.
        risen = listings[run % len(listings)]
        set_product(risen.item_code, price=1000)

        # The lease expires (and the killed process's answers grow too old to reuse).
        later = timezone.now() + dt.timedelta(
            seconds=LEASE_SECONDS + settings.OUTBOX_REFETCH_MAX_AGE + 1
        )
        with time_machine.travel(later, tick=True) as clock:
            for _ in range(10):
                run_cycle()
                if not not_terminal(list(rows.values())):
                    break
                clock.shift(dt.timedelta(minutes=31))

        ids = list(rows.values())
        dropped = set(
            Outbox.objects.filter(id__in=ids, status=Status.DROPPED).values_list("id", flat=True)
        )
        assert statuses(ids) == Counter(
            {Status.SENT: len(ids) - len(dropped), Status.DROPPED: len(dropped)}
        ), "every row sent, or dropped on the item whose price rose"
        assert not Outbox.objects.filter(id__in=dropped).exclude(watch__listing_id=risen.pk)
        # A mail tells one row, or several (a digest, one link per item): count rows told.
        copies: dict[int, list[str]] = defaultdict(list)
        answers: dict[str, set[str]] = {}  # Message-ID -> the Message-IDs it answers
        mails = smtp_server.messages()
        for mail in mails:
            text = mail.get_body(("plain",)).get_content()
            told = [
                rows[(mail["To"].strip(), int(listing_id))]
                for listing_id in re.findall(r"/listings/(\d+)/", text)
            ]
            message_id = mail["Message-ID"].strip()
            answers[message_id] = set((mail["In-Reply-To"] or "").split())
            host = message_id.split("@")[1]
            if len(told) == 1 and "outbox-digest-" not in message_id:
                assert message_id == f"<outbox-{told[0]}@{host}"
            else:
                # A digest's Message-ID is decided by the rows it tells (a row that went out
                # in a digest before goes out again in one, of one if need be).
                assert message_id == f"<outbox-digest-{digest_id(told)}@{host}"
            for row_id in told:
                copies[row_id].append(message_id)
        duplicated = [row_id for row_id, ids_ in copies.items() if len(ids_) > 1]
        for row_id in duplicated:
            assert len(copies[row_id]) == 2, f"row {row_id} mailed {len(copies[row_id])} times"
            # Mailed again as the same message (alone, or in the same digest: one
            # Message-ID, folded), or in a digest of other rows that answers the first mail
            # (In-Reply-To: shown in its thread, after it).
            first, again = copies[row_id]
            assert again == first or first in answers[again], (copies[row_id], answers)
        totals.update(
            rows=len(ids),
            mails=len(mails),
            told=sum(len(m) for m in copies.values()),
            duplicates=len(duplicated),
            answering=sum(1 for row_id in duplicated if len(set(copies[row_id])) > 1),
            lost=len(set(ids) - dropped - copies.keys()),
        )
        # The next run starts from the market as it was, polled a while ago.
        set_product(risen.item_code, price=900)
        Listing.objects.filter(pk__in=[item.pk for item in listings]).update(
            price=900, last_polled_at=timezone.now() - dt.timedelta(minutes=2)
        )

    figures(
        "crash-email",
        runs=runs,
        rows=totals["rows"],
        mails=totals["mails"],
        told=totals["told"],
        duplicates=totals["duplicates"],
        mailed_again_answering_the_first=totals["answering"],
        lost=totals["lost"],
    )
    assert totals["lost"] == 0
