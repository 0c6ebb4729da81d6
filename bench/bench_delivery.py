"""Delivery: a crowd told — one dispatcher cycle over 2,000 due rows, one for each of 2,000
Web Push devices whose watch of one popular Rakuten listing crossed — on the path production
takes: the re-check through the Rakuten adapter over HTTP to a fake Ichiba on 127.0.0.1 with
one application id and its real limiter (1 request/s, so batches of the rows the id can
re-check while an answer is fresh), then the real Web Push channel (encryption, VAPID
signature, keep-alive HTTP) to a loopback push service that answers 201 after 50 ms.

With 1 and with 8 delivery workers, taking turns going first for 3 rounds (medians), beside
the ideal `pushes × 50 ms / workers`; the process's CPU time (the cycle's, with the fake
Ichiba and the push service that run in it) says when the process, not the push service, is
the bound. Pushes and marketplace requests are the last round's.

    .venv/bin/python bench/bench_delivery.py [ROWS]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.ichiba import FakeIchiba, key_for

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
LATENCY = 0.05
WORKERS = (1, 8)
ROUNDS = 3
APP_ID = "delivery-app"

os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@yasugoro.example")
os.environ.setdefault("DEBUG", "0")  # DEBUG would keep every query in memory
os.environ["RAKUTEN_APP_ID"] = APP_ID
os.environ["RAKUTEN_ACCESS_KEY"] = key_for(APP_ID)
os.environ.pop("RAKUTEN_APP_IDS", None)
os.environ.pop("REDIS_URL", None)  # one host: its budget is the fleet's

from _push import due_webpush_rows, start_slow_push_service, webpush_devices
from _setup import django_on_temp_sqlite

django_on_temp_sqlite("delivery")

from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from outbox.dispatch import run_cycle
from outbox.models import Status
from watches.models import Listing


def crowd(fake: FakeIchiba, devices: list, tag: str) -> None:
    """One listing on sale at the fake Ichiba, a watch of it on every device, each watch's
    row due."""
    code = f"crowdshop:{tag}"
    fake.add(code, price=900)
    listing = Listing.objects.create(source="rakuten", item_code=code, name=code, price=900)
    due_webpush_rows(devices, [listing], len(devices))


def main() -> None:
    call_command("vapid_keys", "--ensure", verbosity=0)
    server, origin = start_slow_push_service(LATENCY)
    fake = FakeIchiba()
    fake.accept(APP_ID)
    fake.start()
    devices = webpush_devices(origin, "crowd", ROWS)
    print(
        f"rows: {ROWS:,} (one device each, one Rakuten listing), push service latency "
        f"{LATENCY * 1000:.0f} ms, webpush channel; one id at "
        f"{settings.RAKUTEN_RATE_PER_SECOND:g} request/s"
    )
    times: dict[int, list[float]] = {workers: [] for workers in WORKERS}
    cpu: dict[int, list[float]] = {workers: [] for workers in WORKERS}
    pushes: dict[int, int] = {}
    asked: dict[int, int] = {}
    with override_settings(
        RAKUTEN_API_URL=fake.url,
        RAKUTEN_ACCESS_KEYS={APP_ID: key_for(APP_ID)},
        MARKETPLACE_ADAPTERS={
            **settings.MARKETPLACE_ADAPTERS,
            "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
        },
        PUSH_SERVICE_HOSTS=[origin],
        OUTBOX_CYCLE_SECONDS=3600,
    ):
        for round_ in range(ROUNDS):
            for workers in WORKERS if round_ % 2 == 0 else WORKERS[::-1]:  # turns going first
                crowd(fake, devices, f"r{round_}w{workers}")
                settings.OUTBOX_DELIVERY_WORKERS = workers
                pushes_before, asked_before = server.pushes, len(fake.requests)
                started, cpu_started = time.perf_counter(), time.process_time()
                result = run_cycle(limit=ROWS)
                times[workers].append(time.perf_counter() - started)
                cpu[workers].append(time.process_time() - cpu_started)
                assert result.by_status[Status.SENT] == ROWS, result
                pushes[workers] = server.pushes - pushes_before
                asked[workers] = len(fake.requests) - asked_before
    for workers in WORKERS:
        elapsed = statistics.median(times[workers])
        ideal = pushes[workers] * LATENCY / workers
        print(
            f"{workers} worker(s): median {elapsed:5.1f} s of {ROUNDS}  {ROWS / elapsed:6.1f} "
            f"rows/s  CPU {statistics.median(cpu[workers]):5.1f} s  {pushes[workers]:,} pushes  "
            f"{asked[workers]} marketplace request(s)  ideal {ideal:5.1f} s  "
            f"ratio ideal/ours {ideal / elapsed:.2f}"
        )
    fake.stop()
    server.shutdown()


main()
