"""Delivery: one dispatcher cycle over 2,000 due rows through the real Web Push channel
(encryption, VAPID signature, keep-alive HTTP) to a loopback push service that answers 201
after 50 ms — with 1 and with 8 delivery workers — beside the ideal `rows × 50 ms / workers`.

    .venv/bin/python bench/bench_delivery.py [ROWS]
"""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from _setup import django_on_temp_sqlite

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
LATENCY = 0.05
WORKERS = (1, 8)

os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@yasugoro.example")
django_on_temp_sqlite("delivery")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Status
from watches.models import Channel, Device, Listing, Trigger, Watch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class SlowPushService(BaseHTTPRequestHandler):
    """Takes the message, waits LATENCY, answers 201 — a push service far away."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(LATENCY)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def build_rows(origin: str, tag: str) -> None:
    code = f"bench-delivery-{tag}"
    DemoProduct.objects.create(item_code=code, name=code, price=900)
    listing = Listing.objects.create(source="demo", item_code=code, name=code, price=900)
    devices = []
    for i in range(50):
        point = (
            ec.generate_private_key(ec.SECP256R1())
            .public_key()
            .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        )
        devices.append(
            Device(
                token_hash=f"{tag}-{i}",
                channel=Channel.WEBPUSH,
                push_endpoint=f"{origin}/push/{tag}/{i}",
                push_p256dh=b64url(point),
                push_auth=b64url(os.urandom(16)),
                push_active=True,
            )
        )
    devices = Device.objects.bulk_create(devices)
    watches = Watch.objects.bulk_create(
        Watch(
            device=devices[i % len(devices)],
            listing=listing,
            trigger=Trigger.TARGET_PRICE,
            target_price=950,
        )
        for i in range(ROWS)
    )
    now = timezone.now()
    enqueue_many(
        Detection(w.pk, w.device_id, Channel.WEBPUSH, Trigger.TARGET_PRICE, now, {"price": 900})
        for w in watches
    )


def main() -> None:
    call_command("vapid_keys", "--ensure", verbosity=0)
    server = _Server(("127.0.0.1", 0), SlowPushService)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
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
