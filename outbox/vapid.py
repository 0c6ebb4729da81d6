"""The VAPID key pair that signs every push request (RFC 8292).

The private key comes from VAPID_PRIVATE_KEY (base64url of the raw 32-byte scalar, as printed
by `manage.py vapid_keys --print`) or else from the PEM file at VAPID_PRIVATE_KEY_FILE
(git-ignored, created by `manage.py vapid_keys --ensure`). Its public half, base64url of the
65-byte uncompressed point, is the `applicationServerKey` browsers subscribe with — changing
the key pair orphans every existing subscription, so nothing here ever replaces a key.

The private key never leaves this module except through `private_key_b64()` (to the `--print`
command): pushes get a signed token (`authorization`), errors name the setting, never the value.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from py_vapid import Vapid


class VapidKeyMissing(Exception):
    """No usable VAPID private key is configured. The message says where to put one."""


def generate_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def ensure_key_file(path: Path | None = None) -> bool:
    """Create the PEM key file (mode 0600) unless it exists. True when it was created.
    Safe when two processes race: exactly one creates it, the other keeps it."""
    path = Path(path or settings.VAPID_PRIVATE_KEY_FILE)
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = generate_private_key().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return True


def private_key() -> ec.EllipticCurvePrivateKey:
    """The configured private key, or VapidKeyMissing."""
    raw = settings.VAPID_PRIVATE_KEY
    path = Path(settings.VAPID_PRIVATE_KEY_FILE)
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        mtime = None
    return _load(raw, str(path), mtime)


@lru_cache(maxsize=4)
def _load(raw: str, path: str, mtime: int | None) -> ec.EllipticCurvePrivateKey:
    if raw:
        return _from_raw(raw)
    if mtime is None:
        raise VapidKeyMissing(
            "no VAPID key: set VAPID_PRIVATE_KEY, or run `manage.py vapid_keys --ensure` "
            f"to create {path}"
        )
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError):
        raise VapidKeyMissing(f"{path} is not a PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise VapidKeyMissing(f"{path} does not hold a P-256 key")
    return key


def _from_raw(raw: str) -> ec.EllipticCurvePrivateKey:
    problem = "VAPID_PRIVATE_KEY must be the base64url raw P-256 key `vapid_keys --print` gives"
    try:
        data = base64.urlsafe_b64decode(raw.strip() + "=" * (-len(raw.strip()) % 4))
    except (binascii.Error, ValueError):
        raise VapidKeyMissing(problem) from None
    if len(data) != 32:
        raise VapidKeyMissing(problem)
    try:
        return ec.derive_private_key(int.from_bytes(data, "big"), ec.SECP256R1())
    except ValueError:
        raise VapidKeyMissing(problem) from None


def private_key_b64(key: ec.EllipticCurvePrivateKey | None = None) -> str:
    """The private key as VAPID_PRIVATE_KEY wants it. Only for `vapid_keys --print`."""
    key = key or private_key()
    return _b64url(key.private_numbers().private_value.to_bytes(32, "big"))


def public_key_b64(key: ec.EllipticCurvePrivateKey | None = None) -> str:
    """The applicationServerKey: base64url of the 65-byte uncompressed public point."""
    key = key or private_key()
    point = key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return _b64url(point)


def public_key_or_empty() -> str:
    """For pages: the applicationServerKey, or "" when push is not configured here."""
    try:
        return public_key_b64()
    except VapidKeyMissing:
        return ""


# A signed token serves every push to one push service for a while: RFC 8292 lets a token
# live up to 24 hours, pywebpush signs each push's for 12. Ours are signed for 12 hours and
# reused for at most one, so every push carries a token with more than 11 hours left — and an
# ECDSA signature is made once an hour per push service rather than once per push (a twentieth
# of a push's CPU time).
TOKEN_LIFETIME = 12 * 3600
TOKEN_REUSE = 3600
# Tokens kept: a few push services, times a key changed by staff while workers ran.
_TOKENS_KEPT = 64
_tokens: dict[tuple[ec.EllipticCurvePrivateKey, str, str], tuple[float, dict[str, str]]] = {}


def authorization(endpoint: str, subject: str) -> dict[str, str]:
    """The VAPID header for a push to `endpoint` (`{"Authorization": "vapid t=…, k=…"}`):
    a token for the push service's origin (`aud`), from `subject` (`sub`, VAPID_SUBJECT),
    signed with the configured key (VapidKeyMissing without one). Threads may share it: at
    worst two sign the same token at once, and both are valid."""
    key = private_key()
    parts = urlsplit(endpoint)
    audience = f"{parts.scheme}://{parts.netloc}"
    now = time.time()
    cached = (key, subject, audience)
    found = _tokens.get(cached)
    if found is not None and found[0] <= now < found[0] + TOKEN_REUSE:
        return dict(found[1])  # the caller's own, to add headers to
    headers = _signer(key).sign({"sub": subject, "aud": audience, "exp": int(now) + TOKEN_LIFETIME})
    if len(_tokens) >= _TOKENS_KEPT:
        _tokens.clear()
    _tokens[cached] = (now, headers)
    return dict(headers)


@lru_cache(maxsize=4)
def _signer(key: ec.EllipticCurvePrivateKey) -> Vapid:
    return Vapid(private_key=key)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
