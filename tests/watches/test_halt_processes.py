"""Two dispatcher processes and a polling process asking a halted Rakuten in the same
instant, against the fake Ichiba: exactly one probe reaches it (the conditional UPDATE of
`probe_after` decides who sends it), every held row stays `retry`; once Rakuten answers again
the probe lifts the halt and the held rows go out. Real processes on the test database (a
file on SQLite, PostgreSQL with DATABASE_URL), as production runs them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.utils import timezone

from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from tests import processes
from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from tests.fakes.ichiba import ACCESS_KEY, APP_ID
from tests.outbox_helpers import enqueue_for
from tests.reliability.world import child_env
from watches.marketplaces.halts import PROBE_ANSWER_WAIT
from watches.models import Listing, MarketplaceHalt
from watches.polling.observations import fetch
from watches.polling.poll import poll

ROLES = ("dispatch", "dispatch", "poll")


def together(env: dict[str, str], tmp_path: Path, name: str) -> list[dict]:
    return processes.together(env, tmp_path, name, ROLES)


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_and_a_poller_send_one_probe_then_resume(ichiba, settings, tmp_path):
    codes = [f"yasu-shop:item-{n}" for n in range(8)]
    for code in codes:
        ichiba.add(code, price=900)
    rows = []
    for code in codes[:4]:
        listing = ListingFactory(source="rakuten", item_code=code, price=900, units_per_pack=None)
        watch = WatchFactory(listing=listing, device=DeviceFactory(), target_price=1000)
        rows.append(enqueue_for(watch, price=900, line="1000").pk)
    for code in codes[4:]:
        ListingFactory(source="rakuten", item_code=code, last_polled_at=None)

    # Rakuten retired the version: the first request halts it.
    settings.RAKUTEN_API_VERSION = "20220601"
    fetch("rakuten", [codes[0]])
    assert len(ichiba.requests) == 1
    env = child_env(
        RAKUTEN_APP_ID=APP_ID,
        RAKUTEN_ACCESS_KEY=ACCESS_KEY,
        RAKUTEN_API_URL=ichiba.url,
        RAKUTEN_API_VERSION="20220601",
        MARKETPLACE_PROBE_SECONDS=300,
        OUTBOX_MAX_RETRY=0,  # a counted retry would be `failed` at once
        OUTBOX_BATCH_SIZE=1,  # the two dispatchers take rows one by one, side by side
    )

    def five_minutes_later() -> None:
        """The probe time and the rows held until it, come, without waiting them out."""
        now = timezone.now()
        MarketplaceHalt.objects.update(probe_after=now)
        Outbox.objects.filter(pk__in=rows, status=Status.RETRY).update(next_attempt_at=now)

    # The probe is due: two dispatchers and a poller ask at once; one of them probes. Three
    # intervals, three probes, each refused.
    held = Outbox.objects.filter(pk__in=rows)
    claimed = 0
    for interval in (1, 2, 3):
        five_minutes_later()
        done = together(env, tmp_path, f"refused-{interval}")
        claimed += sum(
            1 for role, out in zip(ROLES, done, strict=True) if role == "dispatch" and out["retry"]
        )
        assert len(ichiba.requests) == 1 + interval, [r.get("itemCode") for r in ichiba.requests]
        assert MarketplaceHalt.objects.get().probe_after > timezone.now()
        assert set(held.values_list("status", "reason", "retry_count")) == {
            (Status.RETRY, Reason.MARKETPLACE_HALTED, 0)
        }
    assert claimed >= 3  # the dispatchers did ask, and were answered without a request

    # Fixed: the next probe is answered, the halt lifts, the held rows go out — those a
    # dispatcher held while the probe was in flight on their next attempt, seconds later.
    ichiba.versions.add("20220601")
    five_minutes_later()
    together(env, tmp_path, "answered")
    assert not MarketplaceHalt.objects.exists()
    soon = timezone.now() + dt.timedelta(seconds=PROBE_ANSWER_WAIT)
    assert not held.exclude(status=Status.SENT).filter(next_attempt_at__gt=soon).exists()
    Outbox.objects.filter(pk__in=rows, status=Status.RETRY).update(next_attempt_at=timezone.now())
    run_cycle()
    assert set(held.values_list("status", flat=True)) == {Status.SENT}

    # Polling resumes by itself: the next run asks for every listing that is due.
    asked = len(ichiba.requests)
    due = Listing.objects.filter(item_code__in=codes[4:], last_polled_at__isnull=True).count()
    result = poll()
    assert result.errors == 0 and result.observations >= due
    assert len(ichiba.requests) == asked + result.listings
