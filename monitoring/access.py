"""Who may read /metrics: a bearer token from the environment, or a request from this host."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest

# A proxy on this host relays the world's requests from 127.0.0.1 too; it names the real
# client in one of these, so a request carrying one is never taken as local.
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def has_token(request: HttpRequest) -> bool:
    """`Authorization: Bearer <METRICS_TOKEN>`, compared in constant time."""
    token = settings.METRICS_TOKEN
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def is_local(request: HttpRequest) -> bool:
    """From a loopback address and not relayed by a proxy."""
    if any(header in request.META for header in FORWARDING_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def may_read_metrics(request: HttpRequest) -> bool:
    return has_token(request) or (settings.METRICS_ALLOW_LOCALHOST and is_local(request))
