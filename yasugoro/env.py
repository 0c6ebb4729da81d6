"""Small, loud readers for settings taken from the environment.

A bad value stops start-up with ImproperlyConfigured instead of being silently replaced by a
default: a typo in production should never turn into a different behaviour.
"""

from __future__ import annotations

import os
import re
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


def rakuten_applications() -> dict[str, str]:
    """Rakuten's application ids, each with its access key (the `accessKey` every request
    needs since 2026): `RAKUTEN_APP_IDS=id:key,id:key`, else `RAKUTEN_APP_ID` with
    `RAKUTEN_ACCESS_KEY`; none when neither is set. An id without its key stops start-up,
    naming the variable to set; the refusal never repeats an id or a key (start-up errors
    end up in logs)."""
    single_id = env_str("RAKUTEN_APP_ID").strip()
    single_key = env_str("RAKUTEN_ACCESS_KEY").strip()
    pairs: dict[str, str] = {}
    for number, entry in enumerate(env_list("RAKUTEN_APP_IDS", []), start=1):
        app_id, _, key = (part.strip() for part in entry.partition(":"))
        if not app_id or not key:
            raise ImproperlyConfigured(
                f"RAKUTEN_APP_IDS: application {number} has no access key; write each "
                "application as id:key, the key being its access key (pk_…) from Rakuten "
                "Developers"
            )
        pairs[app_id] = key
    if pairs:
        if single_id and single_id not in pairs:
            raise ImproperlyConfigured(
                "RAKUTEN_APP_ID is not one of RAKUTEN_APP_IDS: set one or the other"
            )
        return pairs
    if single_id and not single_key:
        raise ImproperlyConfigured(
            "RAKUTEN_APP_ID is set without its access key: set RAKUTEN_ACCESS_KEY to the "
            "application's access key (pk_…), shown beside its id on Rakuten Developers"
        )
    if single_key and not single_id:
        raise ImproperlyConfigured(
            "RAKUTEN_ACCESS_KEY is set without RAKUTEN_APP_ID: set the application id too"
        )
    return {single_id: single_key} if single_id else {}


def check_rakuten_api_url(base: str, version: str) -> None:
    """Refuse a Rakuten Item Search URL (`base`/`version`: RAKUTEN_API_URL and
    RAKUTEN_API_VERSION) that would fail every request: a version that is not a date, the
    host that stopped in May 2026, a base that already ends in a version."""
    from urllib.parse import urlsplit

    if not re.fullmatch(r"\d{8}", version):
        raise ImproperlyConfigured(
            f"RAKUTEN_API_VERSION must be a date of eight digits (e.g. 20260701), got {version!r}"
        )
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"RAKUTEN_API_URL must be an http(s) URL, got {base!r}")
    if parts.hostname == "app.rakuten.co.jp":
        raise ImproperlyConfigured(
            "RAKUTEN_API_URL names app.rakuten.co.jp, which stopped answering on 2026-05-14: "
            "unset it (the default is https://openapi.rakuten.co.jp/ichibams/api/IchibaItem/"
            "Search)"
        )
    if re.search(r"/\d{8}/?$", parts.path):
        raise ImproperlyConfigured(
            "RAKUTEN_API_URL ends in a version: give it without one, and the version in "
            "RAKUTEN_API_VERSION"
        )


def site_origin(name: str, url: str) -> str:
    """The origin (scheme://host[:port]) of the site in setting `name`; '' when unset."""
    from urllib.parse import urlsplit

    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"{name} must be an http(s) URL, got {url!r}")
    return f"{parts.scheme}://{parts.netloc}"
