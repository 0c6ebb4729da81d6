"""Anonymous devices: a browser is a person's identity.

A device is created on first need (subscribing to push, creating a watch). Its token — 256
random bits — lives only in an HttpOnly cookie; the database keeps the token's SHA-256, so a
copy of the database cannot be turned into cookies. Every view resolves the device from the
cookie and reads or changes only what that device owns; anything else is a 404, never a 403,
so ids and tokens cannot be probed.

A device can move to another browser with a one-time link (short-lived, single use: only its
hash is stored, and redeeming it gives the device a new token, so the old browser's cookie
stops working), and can delete itself with everything it owns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets

from django.conf import settings
from django.db import models
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.cache import patch_cache_control, patch_vary_headers

from watches.models import Channel, Device

# token_urlsafe(32): 32 random bytes, 43 base64url characters.
_TOKEN_BYTES = 32
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")
# last_seen_at is for "devices idle for a year" clean-up, not analytics: hourly is plenty,
# and it keeps a page view from being a database write.
SEEN_RESOLUTION = dt.timedelta(hours=1)

# Request attributes this module uses; the middleware reads them on the way out.
_DEVICE = "_yasugoro_device"
_SET_TOKEN = "_yasugoro_device_token"  # noqa: S105 (an attribute name)
_FORGET = "_yasugoro_device_forget"


def cookie_name() -> str:
    """`__Host-` makes the browser refuse the cookie unless it is Secure, host-only and for
    path /, so no subdomain or plain-HTTP page can plant or read one. Plain HTTP (DEBUG,
    tests) cannot use the prefix."""
    return "__Host-yasugoro_device" if settings.DEVICE_COOKIE_SECURE else "yasugoro_device"


def new_token() -> str:
    return secrets.token_urlsafe(_TOKEN_BYTES)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def get_device(request: HttpRequest) -> Device | None:
    """The device the request's cookie names, or None. Looked up once per request."""
    if hasattr(request, _DEVICE):
        return getattr(request, _DEVICE)
    device = None
    token = request.COOKIES.get(cookie_name(), "")
    if _TOKEN_RE.fullmatch(token):
        device = Device.objects.filter(token_hash=hash_token(token)).first()
        if device is not None:
            touch(device)
    setattr(request, _DEVICE, device)
    return device


def get_or_create_device(request: HttpRequest) -> Device:
    """The request's device, created (and its cookie set on the response) when it has none."""
    device = get_device(request)
    if device is not None:
        return device
    token = new_token()
    device = Device.objects.create(token_hash=hash_token(token), language=_language(request))
    setattr(request, _DEVICE, device)
    setattr(request, _SET_TOKEN, token)
    return device


def require_device(request: HttpRequest) -> Device:
    """The request's device, or 404: a request without one owns nothing."""
    device = get_device(request)
    if device is None:
        raise Http404("no such device")
    return device


def owned_or_404(request: HttpRequest, queryset: models.QuerySet | type[models.Model], **lookup):
    """One object that the request's device owns (its `device` field), or 404 — the same
    answer whether it does not exist or belongs to someone else."""
    device = require_device(request)
    if isinstance(queryset, type):
        queryset = queryset._default_manager.all()
    obj = queryset.filter(device=device, **lookup).first()
    if obj is None:
        raise Http404("not found")
    return obj


def push_active(device: Device | None) -> bool:
    """Whether this browser can be sent a Web Push right now (what the pages show)."""
    return bool(device and device.channel == Channel.WEBPUSH and device.can_receive)


def touch(device: Device, now: dt.datetime | None = None) -> None:
    """Move last_seen_at forward, at most once per SEEN_RESOLUTION."""
    now = now or timezone.now()
    if now - device.last_seen_at < SEEN_RESOLUTION:
        return
    Device.objects.filter(pk=device.pk, last_seen_at__lt=now - SEEN_RESOLUTION).update(
        last_seen_at=now
    )
    device.last_seen_at = now


def create_transfer_link(device: Device, now: dt.datetime | None = None) -> str:
    """A new one-time transfer token for `device` (its hash stored, valid for
    DEVICE_TRANSFER_MINUTES). Any earlier link stops working."""
    now = now or timezone.now()
    token = new_token()
    device.transfer_token_hash = hash_token(token)
    device.transfer_expires_at = now + dt.timedelta(minutes=settings.DEVICE_TRANSFER_MINUTES)
    Device.objects.filter(pk=device.pk).update(
        transfer_token_hash=device.transfer_token_hash,
        transfer_expires_at=device.transfer_expires_at,
    )
    return token


def peek_transfer(token: str, now: dt.datetime | None = None) -> Device | None:
    """The device a still-valid transfer token would move, without using it up."""
    if not _TOKEN_RE.fullmatch(token):
        return None
    now = now or timezone.now()
    return Device.objects.filter(
        transfer_token_hash=hash_token(token), transfer_expires_at__gt=now
    ).first()


def redeem_transfer(
    request: HttpRequest, token: str, now: dt.datetime | None = None
) -> Device | None:
    """Move the device of a valid transfer token to this browser: the device gets a new
    token (the old browser's cookie stops working) and this response sets it. The link is
    burnt by the same conditional UPDATE, so two browsers racing on one link cannot both win.

    The push subscription belonged to the old browser, which can no longer manage it, so it
    is cleared: this browser subscribes for itself. Returns None for an unknown, used or
    expired token."""
    if not _TOKEN_RE.fullmatch(token):
        return None
    now = now or timezone.now()
    fresh = new_token()
    moved = Device.objects.filter(
        transfer_token_hash=hash_token(token), transfer_expires_at__gt=now
    ).update(
        token_hash=hash_token(fresh),
        transfer_token_hash=None,
        transfer_expires_at=None,
        push_endpoint="",
        push_p256dh="",
        push_auth="",
        push_active=False,
        push_subscribed_at=None,
        last_seen_at=now,
    )
    if moved != 1:
        return None
    device = Device.objects.get(token_hash=hash_token(fresh))
    setattr(request, _DEVICE, device)
    setattr(request, _SET_TOKEN, fresh)
    return device


def delete_device(request: HttpRequest) -> bool:
    """Delete the request's device and everything it owns (watches, notifications and their
    history cascade), and clear the cookie. False when there was no device."""
    device = get_device(request)
    setattr(request, _FORGET, True)
    setattr(request, _DEVICE, None)
    if device is None:
        return False
    device.delete()
    return True


def _language(request: HttpRequest) -> str:
    code = getattr(request, "LANGUAGE_CODE", "") or settings.LANGUAGE_CODE
    known = {lang for lang, _ in settings.LANGUAGES}
    return code if code in known else settings.LANGUAGE_CODE


class DeviceCookieMiddleware:
    """Writes what the view decided about the device cookie: set a new token, or clear it.
    Responses that depended on the device are marked private, so no shared cache serves one
    person's page to another."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        token = getattr(request, _SET_TOKEN, None)
        if token:
            response.set_cookie(
                cookie_name(),
                token,
                max_age=settings.DEVICE_COOKIE_MAX_AGE,
                path="/",
                secure=settings.DEVICE_COOKIE_SECURE,
                httponly=True,
                samesite="Lax",
            )
        elif getattr(request, _FORGET, False):
            response.delete_cookie(cookie_name(), path="/", samesite="Lax")
        if hasattr(request, _DEVICE) or token or getattr(request, _FORGET, False):
            patch_vary_headers(response, ["Cookie"])
            patch_cache_control(response, private=True, no_store=True)
        return response
