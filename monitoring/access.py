"""Who may read /metrics: a bearer token from the environment, or a request from this host."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest

# A proxy on this host relays the world's requests from 127.0.0.1 too; it names the real
# client or the original scheme or host in one of these (a TLS-terminating proxy may send only
# X-Forwarded-Proto), so a request carrying one is never taken as local.
FORWARDING_HEADERS = ("HTTP_FORWARDED", "HTTP_X_REAL_IP")
FORWARDING_PREFIX = "HTTP_X_FORWARDED_"  # -For, -Proto, -Host, -Port, -Ssl, -Prefix…


def has_token(request: HttpRequest) -> bool:
    """`Authorization: Bearer <METRICS_TOKEN>`, compared in constant time."""
    token = settings.METRICS_TOKEN
    scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def is_local(request: HttpRequest) -> bool:
    """From a loopback address and not relayed by a proxy."""
    relayed = {*FORWARDING_HEADERS}
    if settings.SECURE_PROXY_SSL_HEADER:  # whatever header BEHIND_PROXY trusts
        relayed.add(settings.SECURE_PROXY_SSL_HEADER[0])
    if any(key in relayed or key.startswith(FORWARDING_PREFIX) for key in request.META):
        return False
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def may_read_metrics(request: HttpRequest) -> bool:
    return has_token(request) or (settings.METRICS_ALLOW_LOCALHOST and is_local(request))
