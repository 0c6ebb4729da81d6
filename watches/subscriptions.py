"""Web Push subscriptions: strict validation of what a browser sends, and storing it.

The dispatcher POSTs to whatever endpoint is stored here, so the endpoint is the one thing a
visitor could use to aim our servers at an arbitrary or internal address. It must therefore be
on the PUSH_SERVICE_HOSTS allowlist — checked here on the way in, and again by the channel
before every send. An allowlist entry is either

- a host, such as "fcm.googleapis.com" or "*.notify.windows.com" (a leading "*." matches any
  subdomain, never the bare domain): the endpoint must be https on port 443; or
- an exact origin, such as "http://127.0.0.1:8765": scheme, host and port must all match.
  Tests list their fake push service this way; nothing else relaxes the check.

The keys must be base64url of the right decoded lengths: p256dh a 65-byte uncompressed P-256
point (and really on the curve — a bad one would make every encryption fail), auth 16 bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.fields import max_length
from common.weburl import NotAWebURL, parse_web_url
from watches.models import Device

MAX_ENDPOINT_LENGTH = max_length(Device, "push_endpoint")

_HOST_RE = re.compile(r"(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*")
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]+={0,2}")


class InvalidSubscription(ValueError):
    """The browser's subscription is not one we can accept; the message says why."""


@dataclass(frozen=True)
class Subscription:
    endpoint: str
    p256dh: str  # base64url, unpadded
    auth: str  # base64url, unpadded


def check_declared_size(content_length: str | None) -> None:
    """Refuse a body whose declared size is over the limit, before anything reads it."""
    limit = settings.PUSH_SUBSCRIPTION_MAX_BYTES
    try:
        declared = int(content_length or 0)
    except ValueError:
        raise InvalidSubscription("The Content-Length header is not a number.") from None
    if declared > limit:
        raise InvalidSubscription(f"The request body is larger than {limit} bytes.")


def parse_json_body(body: bytes, content_type: str) -> Any:
    """The request body as JSON, or InvalidSubscription."""
    limit = settings.PUSH_SUBSCRIPTION_MAX_BYTES
    if len(body) > limit:
        raise InvalidSubscription(f"The request body is larger than {limit} bytes.")
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise InvalidSubscription("Send the subscription as JSON (Content-Type: application/json).")
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidSubscription("The request body is not valid JSON.") from None
    except RecursionError:
        # ~1,000 nested brackets (2 KB, well under the size limit) exhaust the parser's stack.
        raise InvalidSubscription("The request body is nested too deeply.") from None


def parse_subscription(data: Any) -> Subscription:
    """A PushSubscription's JSON (`{"endpoint", "keys": {"p256dh", "auth"}}`), validated."""
    if not isinstance(data, dict):
        raise InvalidSubscription("The subscription must be a JSON object.")
    endpoint = data.get("endpoint")
    keys = data.get("keys")
    if not isinstance(endpoint, str) or not endpoint:
        raise InvalidSubscription("The subscription has no endpoint.")
    if not isinstance(keys, dict):
        raise InvalidSubscription("The subscription has no keys.")
    check_endpoint(endpoint)
    p256dh = _decode_key(keys.get("p256dh"), "keys.p256dh", 65)
    if p256dh[0] != 0x04:
        raise InvalidSubscription("keys.p256dh must be an uncompressed P-256 point (0x04…).")
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
    except ValueError:
        raise InvalidSubscription("keys.p256dh is not a point on the P-256 curve.") from None
    auth = _decode_key(keys.get("auth"), "keys.auth", 16)
    return Subscription(endpoint=endpoint, p256dh=_b64url(p256dh), auth=_b64url(auth))


def check_endpoint(endpoint: str) -> None:
    """Raise InvalidSubscription unless `endpoint` is an https URL on an allowed push service
    (or exactly an allowed origin)."""
    if len(endpoint) > MAX_ENDPOINT_LENGTH:
        raise InvalidSubscription(f"The endpoint is longer than {MAX_ENDPOINT_LENGTH} characters.")
    try:
        url = parse_web_url(endpoint)
    except NotAWebURL:
        raise InvalidSubscription("The endpoint is not a plain http(s) URL.") from None
    hosts, origins = allowlist()
    if url.origin in origins:
        return
    if url.scheme != "https":
        raise InvalidSubscription("The endpoint must be an https URL.")
    if url.port == 443 and any(_host_matches(pattern, url.host) for pattern in hosts):
        return
    shown = url.host if url.port == 443 else f"{url.host}:{url.port}"
    raise InvalidSubscription(f"{shown} is not a known push service.")


def endpoint_allowed(endpoint: str) -> bool:
    try:
        check_endpoint(endpoint)
    except InvalidSubscription:
        return False
    return True


def allowlist() -> tuple[list[str], set[tuple[str, str, int]]]:
    """PUSH_SERVICE_HOSTS split into host patterns and exact (scheme, host, port) origins.
    A malformed entry is a configuration error, not a reason to accept anything."""
    hosts: list[str] = []
    origins: set[tuple[str, str, int]] = set()
    for raw in settings.PUSH_SERVICE_HOSTS:
        entry = raw.strip().lower()
        if "://" in entry:
            try:
                url = parse_web_url(entry)
            except NotAWebURL:
                url = None
            if url is None or url.path not in ("", "/") or url.query:
                raise ImproperlyConfigured(f"PUSH_SERVICE_HOSTS: {raw!r} is not an origin")
            origins.add(url.origin)
        elif _HOST_RE.fullmatch(entry):
            hosts.append(entry)
        else:
            raise ImproperlyConfigured(f"PUSH_SERVICE_HOSTS: {raw!r} is not a host name")
    return hosts, origins


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _decode_key(value: Any, name: str, length: int) -> bytes:
    if not isinstance(value, str) or not value:
        raise InvalidSubscription(f"The subscription has no {name}.")
    if not _B64URL_RE.fullmatch(value):
        raise InvalidSubscription(f"{name} is not base64url.")
    try:
        raw = base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        raise InvalidSubscription(f"{name} is not base64url.") from None
    if len(raw) != length:
        raise InvalidSubscription(f"{name} must decode to {length} bytes, not {len(raw)}.")
    return raw


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def save_subscription(device: Device, subscription: Subscription) -> bool:
    """Store `subscription` as `device`'s one subscription, active. The same endpoint sent
    again updates it in place; if another device held that endpoint (the same browser under
    a new cookie), it moves here. Returns True when the device's endpoint changed."""
    now = timezone.now()
    for attempt in range(2):
        try:
            with transaction.atomic():
                Device.objects.filter(push_endpoint=subscription.endpoint).exclude(
                    pk=device.pk
                ).update(
                    push_endpoint="",
                    push_p256dh="",
                    push_auth="",
                    push_active=False,
                    push_subscribed_at=None,
                )
                changed = device.push_endpoint != subscription.endpoint
                fields = {
                    "push_endpoint": subscription.endpoint,
                    "push_p256dh": subscription.p256dh,
                    "push_auth": subscription.auth,
                    "push_active": True,
                }
                if changed or device.push_subscribed_at is None:
                    fields["push_subscribed_at"] = now
                Device.objects.filter(pk=device.pk).update(**fields)
        except IntegrityError:
            # Another request stored the same endpoint between our two statements
            # (PostgreSQL; SQLite serialises writers). Once more settles it.
            if attempt:
                raise
            continue
        for name, value in fields.items():
            setattr(device, name, value)
        return changed
    raise AssertionError("unreachable")


def clear_subscription(device: Device) -> None:
    """Forget `device`'s subscription (unsubscribe): nothing is kept that we do not need."""
    Device.objects.filter(pk=device.pk).update(
        push_endpoint="",
        push_p256dh="",
        push_auth="",
        push_active=False,
        push_subscribed_at=None,
    )
    device.push_endpoint = device.push_p256dh = device.push_auth = ""
    device.push_active = False
    device.push_subscribed_at = None
