"""Reading a marketplace's JSON answer, once for every adapter: typed fields that raise
`Malformed` (which the adapter turns into `bad_response`), links we are willing to keep, and
an error detail that never carries the request URL (with its application id) to staff."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from common.text import clip
from common.weburl import NotAWebURL, parse_web_url

MAX_DETAIL = 150
# A configuration fault's detail says what to fix and what the marketplace said: longer.
MAX_CONFIG_DETAIL = 300
MAX_URL = 1000


class Malformed(Exception):
    """The answer is not what the API documents: a missing field, a wrong type."""


def field(data: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in data:
        raise Malformed(f"missing field {key}")
    return typed(data, key, kind)


def optional(data: Mapping[str, Any], key: str, kind: type) -> Any:
    if data.get(key) is None:
        return None
    return typed(data, key, kind)


def typed(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data[key]
    # bool is an int to Python, never to the API.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Malformed(f"{key} must be {kind.__name__}, got {type(value).__name__}")
    return value


def whole_number(data: Mapping[str, Any], key: str) -> int:
    """A required whole number that an API may send as a JSON number or as a string of
    digits ("3290"); anything else raises Malformed."""
    if key not in data:
        raise Malformed(f"missing field {key}")
    value = data[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    raise Malformed(f"{key} must be a whole number, got {clip(repr(value), 40)}")


_T = TypeVar("_T")


def each_readable(items: Iterable[Any], parse: Callable[[Any], _T]) -> tuple[list[_T], int]:
    """`parse` of each of a page's `items`, skipping those it finds malformed: one shop's odd
    item must not hide every other item of the answer. Returns what was read and how many
    were not; raises the first Malformed when items there were and none could be read."""
    read: list[_T] = []
    first: Malformed | None = None
    skipped = 0
    for item in items:
        try:
            read.append(parse(item))
        except Malformed as exc:
            first = first or exc
            skipped += 1
    if first is not None and not read:
        raise first
    return read, skipped


def safe_url(url: str | None) -> str:
    """Only plain https links are kept: they end up in admin links and notification icons."""
    if not url or len(url) > MAX_URL:
        return ""
    try:
        parsed = parse_web_url(url)
    except NotAWebURL:
        return ""
    return url if parsed.scheme == "https" else ""


def without_secrets(body: bytes, secrets: Iterable[str]) -> bytes:
    """An answer's `body` with each of our ids and keys in it replaced, before any of its words
    are kept for staff (and shown by /readyz): a gateway's page that echoes the request would
    otherwise put them where a log or a public probe shows them."""
    for secret in secrets:
        if secret:
            body = body.replace(secret.encode(), b"[our key]")
    return body


def request_failed(what: str, exc: Exception) -> str:
    # Only the exception's type: its text carries the request URL, application id included,
    # and this detail is shown to staff.
    return clip(f"{what}: {type(exc).__name__}", MAX_DETAIL)
