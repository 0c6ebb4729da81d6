"""SITE_URL: the address people reach the site at, which every mail links to (the item, the
settings, the unsubscribe link that must never break).

Mails are built by whichever process sends them — the web server (a confirmation), the
django-q2 cluster and `manage.py dispatch_outbox` (notifications) — so the address cannot come
from a request: every process reads the same setting.

- `SITE_URL` in the environment wins. `make run` sets it to where it serves
  (`http://$(HOST):$(PORT)`) for the web server and the cluster, and records it in
  `var/site_url`.
- Under DEBUG, a process started without it (a command run by hand beside `make run`) reads
  what `make run` recorded; then `http://127.0.0.1:8000`.
- Otherwise `https://` + the first of ALLOWED_HOSTS, when that is a host name; a wildcard
  (`*`, `.example.com`) is no address, and start-up stops asking for SITE_URL.

`SiteUrlMiddleware` warns (once per address, per process) when a request comes in at another
address than SITE_URL's: the mails this site sends would point elsewhere.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # the settings import this module: nothing of the request cycle at import
    from django.http import HttpRequest, HttpResponse

log = logging.getLogger("yasugoro.site_url")

DEBUG_DEFAULT = "http://127.0.0.1:8000"
_SHAPE = re.compile(r"https?://[^\s/?#]+")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def read_recorded(path: Path) -> str:
    """The address `make run` recorded (empty when it has not run here)."""
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return ""


def site_url(configured: str, *, recorded: str, debug: bool, allowed_hosts: Sequence[str]) -> str:
    """SITE_URL from the environment's value, the recorded one and the defaults (see the
    module), without a trailing slash. Raises ImproperlyConfigured on a value that is not
    `http(s)://host[:port]`, or when none is given and none can be derived."""
    value = configured or recorded
    if not value and debug:
        value = DEBUG_DEFAULT
    if not value:
        first = allowed_hosts[0] if allowed_hosts else ""
        if not _HOST_NAME.fullmatch(first):
            raise ImproperlyConfigured(
                "SITE_URL (the address every mail links to, such as https://yasugoro.example) "
                f"is required: the first of ALLOWED_HOSTS ({first or 'none'}) is not a host"
            )
        value = f"https://{first}"
    value = value.rstrip("/")
    if not _SHAPE.fullmatch(value):
        raise ImproperlyConfigured(f"SITE_URL must be http(s)://host[:port], got {value!r}")
    return value


def origin(url: str) -> str:
    """`scheme://host[:port]`, lower case, without the scheme's default port."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


# Addresses other than SITE_URL's a process warns about, each once; then once that there are
# more. ALLOWED_HOSTS does not look at the port: anyone may name a new one per request, and a
# warning (and a remembered address) per port would be a way to flood the log.
WARNED_ADDRESSES = 8


class SiteUrlMiddleware:
    """Logs a warning the first time a request arrives at an address other than SITE_URL's
    (per address, per process, for the first WARNED_ADDRESSES of them): mails would send
    people to SITE_URL, where the site may not be. Runs after CommonMiddleware, so the host
    has passed ALLOWED_HOSTS."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        from django.conf import settings

        self.get_response = get_response
        self.expected = origin(settings.SITE_URL)
        self.warned: set[str] = set()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        here = origin(f"{request.scheme}://{request.get_host()}")
        if here != self.expected and here not in self.warned:
            if len(self.warned) >= WARNED_ADDRESSES:
                if len(self.warned) == WARNED_ADDRESSES:
                    self.warned.add("")  # said once: the set stops growing here
                    log.warning(
                        "requests arrive at more than %d addresses other than SITE_URL's: "
                        "no more of them are logged",
                        WARNED_ADDRESSES,
                    )
                return self.get_response(request)
            self.warned.add(here)
            log.warning(
                "this site is reached at %s, but SITE_URL is %s: the links in its mails "
                "(unsubscribe included) point there. Set SITE_URL to the address people use "
                "(`make run` does it for the port it serves).",
                here,
                self.expected,
            )
        return self.get_response(request)
