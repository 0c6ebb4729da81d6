"""A fake Web Push service: a real HTTP server on 127.0.0.1 that does what FCM or Mozilla's
autopush would do with our requests, and lets a test script its answers.

For every POST to one of its subscriptions it
- verifies the VAPID `Authorization: vapid t=<JWT>, k=<key>` header on its own (with
  `cryptography`, not the library under test): ES256 signature against `k`, `aud` equal to
  this service's origin, `exp` in the future and within 24 hours, `sub` as expected;
- decrypts the body (RFC 8291, aes128gcm) with the subscriber's private key and auth secret;
- records TTL, Urgency, Topic, the plaintext and the verdicts;
and answers 201 — or what the test scripted: any status with body and headers, after an
optional delay (a stall past the client's timeout), or after calling a hook.

It can also misbehave at random (`fail_at_random(rate, seed)`), as a push service under load
does: 429 with Retry-After, 500, a stall past the client's timeout, a connection reset, or a
malformed (non-HTTP) answer. Only a 2xx answer really sent counts as a delivery
(`accepted()`); it also counts requests in flight, so a test can see how parallel the client is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import socket
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Subscriber:
    """A browser's side of one subscription: a P-256 key pair and a 16-byte auth secret,
    made the way a browser makes them."""

    id: str
    endpoint: str
    private_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(point)

    def subscription_json(self) -> dict[str, Any]:
        """What `PushSubscription.toJSON()` gives in a browser."""
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": self.p256dh, "auth": b64url(self.auth)},
        }


@dataclass
class Answer:
    status: int = 201
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    before: Callable[[], None] | None = None


@dataclass
class Received:
    subscriber_id: str
    headers: dict[str, str]
    ttl: int | None
    urgency: str | None
    topic: str | None
    plaintext: bytes | None
    decrypt_error: str | None
    vapid_claims: dict[str, Any] | None
    vapid_key: str | None
    vapid_error: str | None
    answered: int  # the status sent back; 0 when no HTTP answer was (a fault)
    fault: str = ""
    answered_at: float = 0.0  # time.time() when the answer went back

    @property
    def accepted(self) -> bool:
        return 200 <= self.answered < 300

    @property
    def tag(self) -> str | None:
        return self.payload.get("tag") if self.plaintext is not None else None

    @property
    def payload(self) -> dict[str, Any]:
        assert self.plaintext is not None, self.decrypt_error
        return json.loads(self.plaintext)

    @property
    def tags(self) -> list[str]:
        """The dedup key of every row this push told: a digest's items', or its own."""
        if self.plaintext is None:
            return []
        items = self.payload.get("items")
        if items:
            return [item["tag"] for item in items]
        return [self.tag] if self.tag else []

    @property
    def is_digest(self) -> bool:
        return self.plaintext is not None and bool(self.payload.get("items"))


FAULTS = ("rate_limited", "server", "stall", "reset", "malformed")


class _Server(ThreadingHTTPServer):
    # Several dispatcher processes with a pool of connections each: the default backlog of 5
    # would drop connections before the server ever sees them.
    request_queue_size = 256


class FakePushService:
    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.subscribers: dict[str, Subscriber] = {}
        self.received: list[Received] = []
        self.answers: deque[Answer] = deque()
        self.lock = threading.Lock()
        # Every answer waits this long (a slow service), unless scripted otherwise.
        self.delay = 0.0
        # Random faults: the share of requests that fail, and how long a stall lasts.
        self.fault_rate = 0.0
        self.stall_seconds = 2.0
        self._random = random.Random(0)
        self.faults: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        # A stalled handler must not hold up shutdown at the end of the test.
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 address (bound to 127.0.0.1)
        return f"http://{host}:{port}"

    def start(self) -> FakePushService:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def new_subscriber(self) -> Subscriber:
        sub_id = b64url(os.urandom(12))
        subscriber = Subscriber(id=sub_id, endpoint=f"{self.origin}/wpush/v2/{sub_id}")
        with self.lock:
            self.subscribers[sub_id] = subscriber
        return subscriber

    def answer(
        self,
        status: int,
        body: str = "",
        headers: dict[str, str] | None = None,
        *,
        delay: float = 0.0,
        before: Callable[[], None] | None = None,
    ) -> None:
        """Script the next answer (answers queue up; then it is 201 again)."""
        with self.lock:
            self.answers.append(Answer(status, body, headers or {}, delay, before))

    def fail_at_random(self, rate: float, seed: int, *, stall_seconds: float = 2.0) -> None:
        """From now on, fail `rate` of the requests, each with one of FAULTS at random."""
        with self.lock:
            self.fault_rate, self._random = rate, random.Random(seed)
            self.stall_seconds = stall_seconds

    def accepted(self) -> list[Received]:
        """The requests answered 2xx: what the service took on to deliver."""
        with self.lock:
            return [r for r in self.received if r.accepted]

    def deliveries_by_tag(self) -> Counter[str]:
        """How many accepted pushes told each row (by its dedup key): a digest tells each of
        its items' rows once."""
        return Counter(tag for r in self.accepted() for tag in r.tags)

    # --- the server side ------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # keep test output quiet
                pass

            def do_POST(self):
                service._handle(self)

        return Handler

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(request)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in request.headers.items()}
        sub_id = request.path.rsplit("/", 1)[-1]
        with self.lock:
            subscriber = self.subscribers.get(sub_id)
            answer = self.answers.popleft() if self.answers else Answer(delay=self.delay)
            fault = ""
            if self.fault_rate and self._random.random() < self.fault_rate:
                fault = self._random.choice(FAULTS)
                self.faults[fault] += 1
                retry_after = str(self._random.randint(1, 120))
        if fault == "rate_limited":
            answer = Answer(429, "slow down", {"Retry-After": retry_after})
        elif fault == "server":
            answer = Answer(500, "internal error")
        elif fault:
            self._misbehave(request, fault, headers, sub_id)
            return
        if subscriber is None:
            answer = Answer(404, "no such subscription")
        plaintext, decrypt_error = self._decrypt(subscriber, headers, body)
        claims, key, vapid_error = self._verify_vapid(headers.get("authorization", ""))
        if answer.status < 300 and (vapid_error or decrypt_error):
            # What a real push service does with a request it cannot authenticate or read.
            answer = Answer(403 if vapid_error else 400, vapid_error or decrypt_error or "")
        record = Received(
            subscriber_id=sub_id,
            headers=headers,
            ttl=int(ttl) if (ttl := headers.get("ttl", "")).isascii() and ttl.isdigit() else None,
            urgency=headers.get("urgency"),
            topic=headers.get("topic"),
            plaintext=plaintext,
            decrypt_error=decrypt_error,
            vapid_claims=claims,
            vapid_key=key,
            vapid_error=vapid_error,
            answered=answer.status,
        )
        with self.lock:
            self.received.append(record)
        if answer.before:
            answer.before()
        if answer.delay:
            time.sleep(answer.delay)
        payload = answer.body.encode()
        record.answered_at = time.time()
        try:
            request.send_response(answer.status)
            for name, value in answer.headers.items():
                request.send_header(name, value)
            if answer.status == 201:
                request.send_header("Location", f"{self.origin}/m/{b64url(os.urandom(8))}")
            request.send_header("Content-Length", str(len(payload)))
            request.end_headers()
            request.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the stall test)

    def _misbehave(
        self, request: BaseHTTPRequestHandler, fault: str, headers: dict[str, str], sub_id: str
    ) -> None:
        """No HTTP answer at all: nothing was taken on (`answered` 0)."""
        record = Received(
            subscriber_id=sub_id,
            headers=headers,
            ttl=None,
            urgency=headers.get("urgency"),
            topic=headers.get("topic"),
            plaintext=None,
            decrypt_error="not read: the service misbehaved",
            vapid_claims=None,
            vapid_key=None,
            vapid_error=None,
            answered=0,
            fault=fault,
        )
        with self.lock:
            self.received.append(record)
        request.close_connection = True
        if fault == "stall":
            time.sleep(self.stall_seconds)
            return
        if fault == "malformed":
            with contextlib.suppress(OSError):
                request.wfile.write(b"\x00\x13garbage, not HTTP\r\n\r\n")
            return
        # reset: close with SO_LINGER 0, so the client gets an RST instead of an answer.
        request.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        request.connection.close()

    def _decrypt(
        self, subscriber: Subscriber | None, headers: dict[str, str], body: bytes
    ) -> tuple[bytes | None, str | None]:
        if subscriber is None:
            return None, "unknown subscription"
        if headers.get("content-encoding") != "aes128gcm":
            return None, f"content-encoding {headers.get('content-encoding')!r}"
        try:
            plaintext = http_ece.decrypt(
                body,
                private_key=subscriber.private_key,
                auth_secret=subscriber.auth,
                version="aes128gcm",
            )
        except Exception as exc:
            return None, f"cannot decrypt: {type(exc).__name__}: {exc}"
        return plaintext, None

    def _verify_vapid(self, authorization: str) -> tuple[dict | None, str | None, str | None]:
        scheme, _, rest = authorization.partition(" ")
        if scheme.lower() != "vapid":
            return None, None, f"authorization scheme {scheme!r} is not vapid"
        params = {}
        for part in rest.split(","):
            name, _, value = part.strip().partition("=")
            params[name] = value
        token, key = params.get("t", ""), params.get("k", "")
        try:
            header_b64, claims_b64, signature_b64 = token.split(".")
            header = json.loads(b64url_decode(header_b64))
            claims = json.loads(b64url_decode(claims_b64))
            signature = b64url_decode(signature_b64)
            public = ec.EllipticCurvePublicKey.from_encoded_point(
                ec.SECP256R1(), b64url_decode(key)
            )
        except ValueError as exc:
            return None, key, f"malformed VAPID token: {exc}"
        if header.get("alg") != "ES256" or len(signature) != 64:
            return claims, key, "VAPID token is not ES256"
        der = encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        )
        try:
            public.verify(der, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return claims, key, "VAPID signature does not verify"
        now = time.time()
        if claims.get("aud") != self.origin:
            return claims, key, f"aud {claims.get('aud')!r} is not {self.origin}"
        if not now < int(claims.get("exp", 0)) <= now + 24 * 3600:
            return claims, key, "exp is not within the next 24 hours"
        if claims.get("sub") != self.subject:
            return claims, key, f"sub {claims.get('sub')!r} is not {self.subject!r}"
        return claims, key, None


def subscribe(client, subscriber: Subscriber):
    """Subscribe the way push.js does: POST the PushSubscription JSON. Returns the device."""
    from watches.models import Device

    response = client.post(
        "/push/subscribe", subscriber.subscription_json(), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    return Device.objects.get(push_endpoint=subscriber.endpoint)
