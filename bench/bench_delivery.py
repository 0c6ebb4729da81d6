"""Delivery: one dispatcher cycle over 2,000 due rows through the real Web Push channel
(encryption, VAPID signature, keep-alive HTTP) to a loopback push service that answers 201
after 50 ms — with 1 and with 8 delivery workers — beside the ideal `rows × 50 ms / workers`.

    .venv/bin/python bench/bench_delivery.py [ROWS]
"""

from __future__ import annotations

import os
import sys
import time

from _push import due_webpush_rows, start_slow_push_service, webpush_devices
from _setup import django_on_temp_sqlite

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
LATENCY = 0.05
WORKERS = (1, 8)

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
    for workers in WORKERS:
        build_rows(origin, f"w{workers}")
        settings.OUTBOX_DELIVERY_WORKERS = workers
        started = time.perf_counter()
        result = run_cycle(limit=ROWS)
        elapsed = time.perf_counter() - started
        assert result.by_status[Status.SENT] == ROWS, result
        ideal = ROWS * LATENCY / workers
        print(
            f"{workers} worker(s): {elapsed:7.1f} s  {ROWS / elapsed:7.1f} rows/s   "
            f"ideal {ideal:6.1f} s  {ROWS / ideal:7.1f} rows/s   "
            f"ratio ideal/ours {ideal / elapsed:.3f}"
        )
    server.shutdown()


main()
