"""The Web Push channel: encrypt the message for one browser subscription (aes128gcm), sign
the request with our VAPID key, and POST it to the subscription's push service.

What the push service answers becomes a DeliveryError kind (the dispatcher's table turns
kinds into outcomes):

    201/202 (any 2xx)          sent
    404, 410                   GONE          the subscription no longer exists
    429                        RATE_LIMITED  honouring Retry-After
    5xx, 408, timeouts,
    refused/reset connections  SERVER / NETWORK   transient: retry
    400, 401, 403, 413,
    other 4xx, 3xx             REJECTED      our request is wrong; retrying cannot help

A read timeout, or a connection dropped once the request was on its way, leaves the push
possibly taken: the error says `maybe_delivered`, and the retry goes out in the same form
(docs/decisions/0066-crash-resend-form.md). A refused connection or a connect timeout never
reached the service.

A redirect is never followed: the endpoint was checked against PUSH_SERVICE_HOSTS, the place
it redirects to was not.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
import requests.auth
import urllib3.exceptions
from django.conf import settings
from pywebpush import WebPushException, webpush

from common.retry_after import parse_retry_after
from common.text import clip
from outbox import vapid
from outbox.channels.base import DeliveryError, DeliveryKind, Message
from watches.services import endpoint_allowed

if TYPE_CHECKING:
    from outbox.models import Outbox
    from watches.models import Device

log = logging.getLogger("outbox.webpush")

URGENCIES = frozenset({"very-low", "low", "normal", "high"})
# RFC 8030: a Topic is at most 32 characters of the base64url alphabet.
_TOPIC_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
# A push message body may be 4,096 bytes once encrypted (RFC 8291); keep the JSON well inside.
_PAYLOAD_LIMIT = 3000
# How much of a push service's refusal we keep for staff to read.
RESPONSE_TEXT_LIMIT = 500

_local = threading.local()


class _NoAuth(requests.auth.AuthBase):
    def __call__(self, request):
        return request


class _NoRedirectSession(requests.Session):
    """A keep-alive session for one delivery thread: never follows a redirect, never takes
    credentials from a `.netrc`, and reads the environment's proxy settings once per push
    service instead of on every request."""

    def __init__(self) -> None:
        super().__init__()
        # A session without credentials of its own looks for a `.netrc` entry on every
        # request, and one for a push service's host would replace the VAPID Authorization
        # header with Basic credentials: never look.
        self.auth = _NoAuth()
        self._environment: dict[tuple[str, str], dict[str, Any]] = {}

    def request(self, *args, **kwargs):
        kwargs["allow_redirects"] = False
        return super().request(*args, **kwargs)

    def merge_environment_settings(self, url, proxies, stream, verify, cert):
        """requests looks up the proxies for `url` in the environment on every request (some
        200 reads of `os.environ` a push, more than the VAPID signature and the encryption
        together). A worker's environment does not change while it runs: the answer for a
        push service's origin is kept, for requests that ask nothing of their own (all of
        ours; any other goes the whole way)."""
        if proxies or stream is not None or verify is not None or cert is not None:
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        origin = tuple(urlsplit(url)[:2])
        found = self._environment.get(origin)
        if found is None:
            found = self._environment[origin] = super().merge_environment_settings(
                url, {}, None, None, None
            )
        return {**found, "proxies": dict(found["proxies"])}  # requests may add to it


def _session() -> requests.Session:
    """One keep-alive session per thread (the dispatcher delivers from a pool of threads;
    a Session is not safe to share between them)."""
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = _NoRedirectSession()
    return session


class WebPushChannel:
    name = "webpush"

    def deliver(self, row: Outbox, message: Message) -> dict | None:
        return self.deliver_to(row.device, message)

    def deliver_to(self, device: Device, message: Message) -> dict:
        """Push `message` to `device`'s subscription, or raise DeliveryError."""
        if not device.push_endpoint or not device.push_p256dh or not device.push_auth:
            raise DeliveryError(DeliveryKind.GONE, "the device has no push subscription")
        if not endpoint_allowed(device.push_endpoint):
            # Stored before the allowlist changed, or written around the subscribe view.
            raise DeliveryError(
                DeliveryKind.REJECTED, "the endpoint is not on PUSH_SERVICE_HOSTS; not sent"
            )
        try:
            token = vapid.authorization(device.push_endpoint, settings.VAPID_SUBJECT)
        except vapid.VapidKeyMissing as exc:
            # A configuration problem staff can fix: keep the row alive meanwhile.
            raise DeliveryError(DeliveryKind.SERVER, f"push is not configured: {exc}") from None
        try:
            response = webpush(
                subscription_info={
                    "endpoint": device.push_endpoint,
                    "keys": {"p256dh": device.push_p256dh, "auth": device.push_auth},
                },
                data=json.dumps(payload(message), ensure_ascii=False, separators=(",", ":")),
                # Signed here, once in a while per push service (outbox.vapid), not per push.
                headers={**_headers(message), **token},
                ttl=settings.WEBPUSH_TTL,
                timeout=(settings.WEBPUSH_CONNECT_TIMEOUT, settings.WEBPUSH_READ_TIMEOUT),
                requests_session=_session(),
            )
        except WebPushException as exc:
            response = exc.response
            if response is None or not 200 <= response.status_code < 300:
                raise _from_response(response) from None
        except requests.Timeout as exc:
            raise DeliveryError(
                DeliveryKind.NETWORK,
                f"push service timed out: {_name(exc)}",
                maybe_delivered=_maybe_taken(exc),
            ) from None
        except requests.RequestException as exc:
            raise DeliveryError(
                DeliveryKind.NETWORK,
                f"push service unreachable: {_name(exc)}",
                maybe_delivered=_maybe_taken(exc),
            ) from None
        if not 200 <= response.status_code < 300:
            raise _from_response(response)
        return {"status_code": response.status_code}


def payload(message: Message) -> dict[str, Any]:
    """What the service worker receives. `url` is a path on our site; the worker refuses
    anything else. Trimmed to fit a push message when a very long name or icon URL would
    not."""
    data = {
        "title": message.title,
        "body": message.body,
        "url": message.url,
        "tag": message.tag,
        "icon": message.icon,
        "listing": message.listing_id,
        "price": message.price,
    }
    if message.items:
        return _digest_payload(message, data)
    if _size(data) > _PAYLOAD_LIMIT:
        data["icon"] = ""
    if _size(data) > _PAYLOAD_LIMIT:
        data["body"] = clip(message.body, 200)
        data["title"] = clip(message.title, 100)
    return data


def _digest_payload(message: Message, data: dict[str, Any]) -> dict[str, Any]:
    """A digest: its title and body, and every item (name, fresh price, link) for the
    worker. To fit a push message, names are shortened first, then the body; a digest is
    never longer than `outbox.digests.MAX_ITEMS` items, which then always fit. Leaving the
    last items out (`more` says how many) is only the last resort of a bigger one."""
    data["digest"] = message.digest_id
    data["items"] = [
        {
            "title": item.title,
            "price": item.price,
            "note": item.price_note,
            "url": item.url,
            "listing": item.listing_id,
            # The row's own dedup key: which rows this push told.
            "tag": item.tag,
        }
        for item in message.items
    ]
    data["more"] = 0
    if _size(data) > _PAYLOAD_LIMIT:
        for item in data["items"]:
            item["title"] = clip(item["title"], 24)
    if _size(data) > _PAYLOAD_LIMIT:
        data["body"] = clip(data["body"], 200)
    while _size(data) > _PAYLOAD_LIMIT and len(data["items"]) > 1:
        data["items"].pop()
        data["more"] += 1
    return data


def _size(data: dict) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())


def _headers(message: Message) -> dict[str, str]:
    headers = {"Urgency": message.urgency if message.urgency in URGENCIES else "normal"}
    if _TOPIC_RE.fullmatch(message.topic or ""):
        headers["Topic"] = message.topic
    elif message.topic:
        log.warning("topic %r is not ≤ 32 base64url characters; sent without one", message.topic)
    return headers


def _from_response(response: requests.Response | None) -> DeliveryError:
    if response is None:
        return DeliveryError(DeliveryKind.NETWORK, "push service gave no response")
    status = response.status_code
    text = _text(response)
    detail = f"push service answered {status}" + (f": {text}" if text else "")
    if status in (404, 410):
        return DeliveryError(DeliveryKind.GONE, detail, status_code=status)
    if status == 429:
        return DeliveryError(
            DeliveryKind.RATE_LIMITED,
            detail,
            status_code=status,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    if status >= 500:
        return DeliveryError(
            DeliveryKind.SERVER,
            detail,
            status_code=status,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )
    if status == 408:
        return DeliveryError(DeliveryKind.NETWORK, detail, status_code=status)
    return DeliveryError(DeliveryKind.REJECTED, detail, status_code=status)


def _text(response: requests.Response) -> str:
    """The body of a refusal on one line, clipped: what staff read in the row's detail."""
    try:
        text = " ".join(response.text.split())
    except Exception:  # an undecodable body is still an answer
        return ""
    return clip(text, RESPONSE_TEXT_LIMIT)


def _maybe_taken(exc: requests.RequestException) -> bool:
    """Whether the push service may have taken the request that failed with `exc`: it timed
    out waiting for the answer, or the connection dropped once the request was on its way
    (requests wraps urllib3's ProtocolError; a failure to connect comes as MaxRetryError)."""
    if isinstance(exc, requests.ReadTimeout | requests.exceptions.ChunkedEncodingError):
        return True
    reason = exc.args[0] if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(
        reason, urllib3.exceptions.ProtocolError
    )


def _name(exc: Exception) -> str:
    # The exception text can carry the whole endpoint URL (a capability): keep the type only.
    return type(exc).__name__
