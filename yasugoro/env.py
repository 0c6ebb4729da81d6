"""Small, loud readers for settings taken from the environment.

A bad value stops start-up with ImproperlyConfigured instead of being silently replaced by a
default: a typo in production should never turn into a different behaviour.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def secret_from_file(path: Path) -> str:
    """Read a secret from `path`, creating it (mode 0600) with a fresh random value when absent.

    Used for the local default only: production passes SECRET_KEY in the environment.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process (web server or qcluster) won the race
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value


# EMAIL_URL schemes: how Django's SMTP backend connects (port when the URL names none).
_EMAIL_SCHEMES = {
    "smtp": (25, False, False),  # plain, or whatever the server offers without STARTTLS
    "smtp+tls": (587, True, False),  # STARTTLS (submission)
    "smtps": (465, False, True),  # TLS from the first byte
}


def email_settings_from_url(url: str) -> dict[str, object]:
    """Django's EMAIL_* settings from one URL: `smtp://user:password@host:port`,
    `smtp+tls://…` (STARTTLS), `smtps://…` (implicit TLS), or `console:` (mails printed to
    stdout). User and password are percent-decoded; `?timeout=S` sets EMAIL_TIMEOUT."""
    from urllib.parse import parse_qs, unquote, urlsplit

    if url.strip() in ("console:", "console://"):
        return {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}
    parts = urlsplit(url)
    if parts.scheme not in _EMAIL_SCHEMES or not parts.hostname:
        raise ImproperlyConfigured(
            "EMAIL_URL must be smtp://, smtp+tls://, smtps://host[:port] or console:, "
            f"got scheme {parts.scheme!r}"
        )
    default_port, tls, ssl = _EMAIL_SCHEMES[parts.scheme]
    try:
        port = parts.port or default_port
    except ValueError:
        raise ImproperlyConfigured("EMAIL_URL has a port that is not a number") from None
    values: dict[str, object] = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": parts.hostname,
        "EMAIL_PORT": port,
        "EMAIL_HOST_USER": unquote(parts.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(parts.password or ""),
        "EMAIL_USE_TLS": tls,
        "EMAIL_USE_SSL": ssl,
    }
    timeout = parse_qs(parts.query).get("timeout")
    if timeout:
        try:
            values["EMAIL_TIMEOUT"] = float(timeout[-1])
        except ValueError:
            raise ImproperlyConfigured("EMAIL_URL's timeout must be a number") from None
    return values
