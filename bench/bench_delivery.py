"""Delivery: one dispatcher cycle over 2,000 due rows through the real Web Push channel
(encryption, VAPID signature, keep-alive HTTP) to a loopback push service that answers 201
after 50 ms — with 1 and with 8 delivery workers, taking turns for 3 rounds (medians) —
beside the ideal `pushes × 50 ms / workers`, where pushes are the messages the service took
(the rows of one device in one batch go out as one digest).

    .venv/bin/python bench/bench_delivery.py [ROWS]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from _push import due_webpush_rows, start_slow_push_service, webpush_devices
from _setup import django_on_temp_sqlite

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
LATENCY = 0.05
WORKERS = (1, 8)
ROUNDS = 3

os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@yasugoro.example")
django_on_temp_sqlite("delivery")

from django.conf import settings
from django.core.management import call_command

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.models import Status
from watches.models import Listing


def build_rows(origin: str, tag: str) -> None:
    code = f"bench-delivery-{tag}"
    DemoProduct.objects.create(item_code=code, name=code, price=900)
    listing = Listing.objects.create(source="demo", item_code=code, name=code, price=900)
    devices = webpush_devices(origin, tag, 50)
    due_webpush_rows(devices, [listing], ROWS)


def main() -> None:
    call_command("vapid_keys", "--ensure", verbosity=0)
    server, origin = start_slow_push_service(LATENCY)
    settings.PUSH_SERVICE_HOSTS = [origin]
    settings.OUTBOX_CYCLE_SECONDS = 3600

    print(f"rows: {ROWS}, push service latency: {LATENCY * 1000:.0f} ms, webpush channel")
    times: dict[int, list[float]] = {workers: [] for workers in WORKERS}
    pushes: dict[int, int] = {}
    for round_ in range(ROUNDS):
        for workers in WORKERS if round_ % 2 == 0 else WORKERS[::-1]:  # turns going first
            build_rows(origin, f"r{round_}w{workers}")
            settings.OUTBOX_DELIVERY_WORKERS = workers
            pushes_before = server.pushes
            started = time.perf_counter()
            result = run_cycle(limit=ROWS)
            times[workers].append(time.perf_counter() - started)
            assert result.by_status[Status.SENT] == ROWS, result
            pushes[workers] = server.pushes - pushes_before
    for workers in WORKERS:
        elapsed = statistics.median(times[workers])
        ideal = pushes[workers] * LATENCY / workers
        print(
            f"{workers} worker(s): median {elapsed:5.1f} s of {ROUNDS}  {ROWS / elapsed:6.1f} "
            f"rows/s  {pushes[workers]:,} pushes   ideal {ideal:5.1f} s   "
            f"ratio ideal/ours {ideal / elapsed:.2f}"
        )
    server.shutdown()


main()
