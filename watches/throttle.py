"""Per-client limits on the requests that write on an anonymous visitor's behalf (adding an
item by its link, subscribing to push): a fixed one-minute window per client address, counted
in the shared cache so every web process sees the same count."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

WINDOW_SECONDS = 60


def allow(request: HttpRequest, scope: str, per_minute: int) -> bool:
    """Count this request against `scope`'s limit for its client address; False once more
    than `per_minute` requests came from that address in the current window."""
    return allow_key(f"{scope}:{client_address(request)}", per_minute, WINDOW_SECONDS)


def allow_key(key: str, limit: int, window_seconds: int) -> bool:
    """Count one more use of `key` in its fixed window; False once it passed `limit`."""
    key = f"throttle:{key}"
    if cache.add(key, 1, timeout=window_seconds):
        return True
    try:
        return cache.incr(key) <= limit
    except ValueError:  # expired between add and incr
        return True


def client_address(request: HttpRequest) -> str:
    """Who is asking, for a per-person limit. Behind our reverse proxy (BEHIND_PROXY) every
    request comes from the proxy, so the address it appended to X-Forwarded-For is used: the
    last one, the only one the proxy vouches for (earlier ones are whatever the client sent)."""
    forwarded = request.headers.get("X-Forwarded-For", "")
    if settings.SECURE_PROXY_SSL_HEADER and forwarded:
        return forwarded.rsplit(",", 1)[-1].strip()[:64]
    return request.META.get("REMOTE_ADDR", "")
