"""A device's e-mail address, double opt-in: added, confirmed by a signed link, unsubscribed
by a signed link, disabled by hard bounces, removed.

Nothing but the confirmation mail is ever sent to an address until its link was opened and
confirmed (`Device.email_active`). Links are `django.core.signing` tokens over the device id
*and* the address, so a link made for an address the device no longer has changes nothing.
Confirmation mails are limited per device and per address (EMAIL_CONFIRM_PER_HOUR), and carry
no text a visitor wrote: the form cannot make us relay anything.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from enum import StrEnum

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.core.mail.message import sanitize_address
from django.db.models import F, Q
from django.template.loader import render_to_string
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from watches import throttle
from watches.models import Device

CONFIRM_SALT = "yasugoro.email.confirm"
UNSUBSCRIBE_SALT = "yasugoro.email.unsubscribe"
_HOUR = 3600


class TokenProblem(StrEnum):
    INVALID = "invalid"  # tampered, truncated, signed for something else
    EXPIRED = "expired"


class BadToken(Exception):
    def __init__(self, problem: TokenProblem) -> None:
        super().__init__(problem.value)
        self.problem = problem


class Throttled(Exception):
    """Too many confirmation mails for this device or this address this hour."""


def normalise(address: str) -> str:
    """The address as stored: trimmed, its domain in lower case (the local part is the
    receiving server's business)."""
    local, _sep, domain = address.strip().rpartition("@")
    return f"{local}@{domain.lower()}" if local else address.strip()


# Names mail from the internet never reaches: this host, a private network, an overlay or
# no host at all (RFC 6761, 6762, 7686, 8375, 9476; "internal" reserved by ICANN for private
# use). ".test" and ".example" stay allowed: RFC 6761 asks software not to treat them as
# special, and test setups mail them (docs/decisions/0059-public-mail-domains-only.md).
NOT_PUBLIC_SUFFIXES = ("localhost", "invalid", "local", "internal", "arpa", "onion", "alt")


def public_domain(domain: str) -> bool:
    """Whether `domain` (of an address Django's EmailValidator accepted) can be a public mail
    domain: not an IP literal ("[127.0.0.1]"), not a single label ("localhost", "intranet"),
    not all digits at the end ("10.0.0.1"), not under a NOT_PUBLIC_SUFFIXES name."""
    labels = domain.lower().rstrip(".").split(".")
    if domain.startswith("[") or len(labels) < 2 or labels[-1].isdigit():
        return False
    return labels[-1] not in NOT_PUBLIC_SUFFIXES


def encodable(address: str) -> bool:
    """Whether mail can be addressed to `address` (one EmailValidator accepted): the mail
    backend encodes every recipient as Django's `sanitize_address` does, its domain to IDNA,
    and a domain IDNA refuses (one holding U+200E, an invisible mark pasted with it) would
    only fail at the first send, once the address is stored."""
    try:
        sanitize_address(address, settings.DEFAULT_CHARSET)
    except ValueError:  # UnicodeError among them
        return False
    return True


def set_address(device: Device, address: str, now: dt.datetime | None = None) -> bool:
    """Give `device` a new, unconfirmed address (a changed address starts over: unconfirmed,
    no bounces). False, and nothing written, when it already has exactly that address
    confirmed and working. Counts against the confirmation limits first: raises Throttled,
    writing nothing, when the device or the address had EMAIL_CONFIRM_PER_HOUR this hour."""
    if device.email == address and device.email_active:
        return False
    limit = settings.EMAIL_CONFIRM_PER_HOUR
    address_key = hashlib.sha256(address.lower().encode()).hexdigest()[:32]
    if not throttle.allow_key(f"email-confirm-device:{device.pk}", limit, _HOUR):
        raise Throttled
    if not throttle.allow_key(f"email-confirm-address:{address_key}", limit, _HOUR):
        raise Throttled
    Device.objects.filter(pk=device.pk).update(
        email=address, email_confirmed_at=None, email_bounces=0, email_disabled_at=None
    )
    device.email, device.email_confirmed_at = address, None
    device.email_bounces, device.email_disabled_at = 0, None
    return True


def remove_address(device: Device) -> None:
    Device.objects.filter(pk=device.pk).update(
        email="", email_confirmed_at=None, email_bounces=0, email_disabled_at=None
    )
    device.email, device.email_confirmed_at = "", None


def confirm_token(device: Device) -> str:
    return signing.dumps({"d": device.pk, "a": device.email}, salt=CONFIRM_SALT)


def unsubscribe_token(device_id: int, address: str) -> str:
    return signing.dumps({"d": device_id, "a": address}, salt=UNSUBSCRIBE_SALT)


def confirm(token: str, now: dt.datetime | None = None) -> Device | None:
    """Confirm the address the token was made for. The device, or None when the device no
    longer has that address (changed or removed since: nothing is changed). Raises BadToken
    for a tampered or expired token."""
    device_id, address = load_token(token, CONFIRM_SALT, settings.EMAIL_CONFIRM_HOURS * _HOUR)
    now = now or timezone.now()
    Device.objects.filter(pk=device_id, email=address, email_confirmed_at=None).update(
        email_confirmed_at=now
    )
    return Device.objects.filter(pk=device_id, email=address).first()


def unsubscribe(token: str) -> bool:
    """RFC 8058 one-click: the address the token names is removed from its device. True when
    it was removed now; False when the device no longer had it (already unsubscribed, changed
    or deleted). Raises BadToken for a tampered or expired token."""
    device_id, address = load_token(
        token, UNSUBSCRIBE_SALT, settings.EMAIL_UNSUBSCRIBE_DAYS * 86400
    )
    removed = Device.objects.filter(pk=device_id, email=address).update(
        email="", email_confirmed_at=None, email_bounces=0, email_disabled_at=None
    )
    return removed == 1


def record_bounces(bounced: Iterable[tuple[int, str]], now: dt.datetime) -> int:
    """Count a hard bounce for each (device id, the address the mail went to) — only while
    that is still the device's address — and disable addresses that reached
    EMAIL_BOUNCE_LIMIT. Returns how many addresses were disabled now."""
    match = Q()
    for device_id, address in set(bounced):
        if address:
            match |= Q(pk=device_id, email=address)
    if not match:
        return 0
    Device.objects.filter(match).update(email_bounces=F("email_bounces") + 1)
    return (
        Device.objects.filter(match, email_disabled_at=None)
        .filter(email_bounces__gte=settings.EMAIL_BOUNCE_LIMIT)
        .update(email_disabled_at=now)
    )


def send_confirmation(device: Device, link: str) -> None:
    """The confirmation mail, in the device's language: our words and the link, nothing a
    visitor typed but the address it goes to. Raises what the mail backend raises."""
    with translation.override(device.language):
        context = {"link": link, "hours": settings.EMAIL_CONFIRM_HOURS}
        mail = EmailMultiAlternatives(
            subject=_("Confirm your e-mail address for Yasugoro"),
            body=render_to_string("watches/email/confirm.txt", context),
            to=[device.email],
        )
        mail.attach_alternative(
            render_to_string("watches/email/confirm.html", context), "text/html"
        )
    mail.send(fail_silently=False)


def load_token(token: str, salt: str, max_age: int) -> tuple[int, str]:
    try:
        data = signing.loads(token, salt=salt, max_age=max_age)
    except signing.SignatureExpired:
        raise BadToken(TokenProblem.EXPIRED) from None
    except signing.BadSignature:
        raise BadToken(TokenProblem.INVALID) from None
    if not (isinstance(data, dict) and isinstance(data.get("d"), int)):
        raise BadToken(TokenProblem.INVALID)
    if not isinstance(data.get("a"), str):
        raise BadToken(TokenProblem.INVALID)
    return data["d"], data["a"]
