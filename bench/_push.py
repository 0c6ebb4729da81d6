"""A push service far away, for the benches: a loopback HTTP server that takes a message,
waits `latency`, answers 201; and Web Push devices subscribed to it."""

from __future__ import annotations

import base64
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    pushes = 0  # messages taken: several rows for one device go out as one digest
    lock = threading.Lock()


def start_slow_push_service(latency: float) -> tuple[_Server, str]:
    """The running server (`pushes`: the messages it took) and its origin
    (`http://127.0.0.1:<port>`)."""

    class SlowPushService(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with server.lock:
                server.pushes += 1
            time.sleep(latency)
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = _Server(("127.0.0.1", 0), SlowPushService)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def webpush_devices(origin: str, tag: str, count: int) -> list:
    """`count` saved Web Push devices, each with its own key pair, subscribed at `origin`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from watches.models import Channel, Device

    def b64url(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    devices = []
    for i in range(count):
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
    return Device.objects.bulk_create(devices)


def due_webpush_rows(devices: list, listings: list, count: int) -> None:
    """`count` target-price watches spread over `devices` and `listings` (target ¥950, the
    listings at ¥900), each with one due Web Push row."""
    from _world import due_rows

    from watches.models import Channel

    due_rows(devices, listings, count, Channel.WEBPUSH)
