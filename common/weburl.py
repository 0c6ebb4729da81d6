"""Reading an absolute http(s) URL, strictly, with `urllib.parse.urlsplit`.

Three callers need the same reading: a push subscription's endpoint (our dispatcher will POST
to it), a marketplace's item and image links (they end up in admin links and notification
icons), and an item link a person pastes. Only URLs that every URL parser reads the same way
are accepted: no userinfo (`https://fcm.googleapis.com@evil.example/`), no backslash, no
whitespace, control or non-ASCII characters, none of the characters RFC 3986 never allows
unencoded (`"<>^`{|}`) nor a quote, and a host of letters, digits, dots and hyphens only (no
IP-literal brackets, no percent-encoding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}

# The authority once userinfo is refused: a plain host name and an optional port of digits.
_AUTHORITY = re.compile(r"(?P<host>[a-z0-9.-]+)(?::(?P<port>\d{1,5}))?")
_BAD_PORT = re.compile(r"[a-z0-9.-]+:.*")
_UNSAFE = frozenset(" \"'<>\\^`{|}")


class NotAWebURL(ValueError):
    """The text is not an absolute http(s) URL we accept. `problem` says which rule it broke:
    `characters`, `scheme`, `no_host`, `userinfo`, `host` or `port`."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True)
class WebURL:
    scheme: str  # "http" or "https", lower case
    host: str  # lower case
    port: int  # as written, else the scheme's default
    explicit_port: bool
    path: str  # "" or starting with "/"
    query: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def default_port(self) -> bool:
        return self.port == DEFAULT_PORTS[self.scheme]


def parse_web_url(text: str) -> WebURL:
    """`text` as an absolute http(s) URL, or NotAWebURL saying what is wrong with it."""
    if not text.isascii() or any(ord(c) < 33 or ord(c) == 127 or c in _UNSAFE for c in text):
        raise NotAWebURL("characters", "The URL has spaces or characters a URL cannot have.")
    try:
        parts = urlsplit(text)
    except ValueError:
        raise NotAWebURL("characters", "The URL is not valid.") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not text[len(parts.scheme) :].startswith("://"):
        raise NotAWebURL("scheme", "The URL is not an http(s) URL.")
    if not parts.netloc or not parts.hostname:
        raise NotAWebURL("no_host", "The URL has no host.")
    if "@" in parts.netloc:
        raise NotAWebURL("userinfo", "The URL has a user name or password in it.")
    authority = _AUTHORITY.fullmatch(parts.netloc.lower())
    if authority is None:
        if _BAD_PORT.fullmatch(parts.netloc.lower()):
            raise NotAWebURL("port", "The URL's port is not a port number.")
        raise NotAWebURL("host", "The URL's host is not a plain host name.")
    port = int(authority["port"]) if authority["port"] else None
    if port is not None and not 0 < port < 65536:
        raise NotAWebURL("port", "The URL's port is not a port number.")
    return WebURL(
        scheme=scheme,
        host=authority["host"],
        port=port if port is not None else DEFAULT_PORTS[scheme],
        explicit_port=port is not None,
        path=parts.path,
        query=parts.query,
    )
