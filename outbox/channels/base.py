"""The one interface to a delivery channel: deliver a message or raise DeliveryError."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from common.registry import configured_instance

if TYPE_CHECKING:
    from outbox.models import Outbox


class DeliveryKind(StrEnum):
    RATE_LIMITED = "rate_limited"  # retry, honouring retry_after
    NETWORK = "network"  # retry
    SERVER = "server"  # retry
    GONE = "gone"  # the subscription no longer exists: drop, deactivate it
    REJECTED = "rejected"  # the service refused our request (400/401/403/413): fail
    BOUNCED = "bounced"  # the mail server refused the recipient (5xx): drop, count the bounce
    # Never a channel's: the dispatcher's send gate did not start a delivery whose value had
    # grown older than OUTBOX_REFETCH_MAX_AGE (retry: the next attempt re-fetches).
    EXPIRED = "expired"


class DeliveryError(Exception):
    """Delivery did not happen, or is not known to have happened. Its `kind` says what the
    dispatcher does next (its table `DELIVERY_OUTCOME`: retry, drop or fail); `retry_after`
    is the service's Retry-After in seconds, when it gave one. `maybe_delivered`: the
    service had the message and no answer came (a read timeout, a connection dropped once
    the request or the mail's DATA was on its way), so it may have taken it: the row is
    marked so and goes out again in the same form (docs/decisions/0066-crash-resend-form.md).
    A service never reached (refused, a connect timeout) is not such a case."""

    def __init__(
        self,
        kind: DeliveryKind,
        message: str = "",
        *,
        retry_after: float | None = None,
        status_code: int | None = None,
        maybe_delivered: bool = False,
    ) -> None:
        super().__init__(message or kind.value)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.status_code = status_code
        self.maybe_delivered = maybe_delivered


@dataclass(frozen=True)
class Message:
    """What we tell the person, built from the value re-fetched right before sending."""

    title: str
    body: str
    url: str  # a path on our own site
    tag: str  # the row's dedup key: a duplicate that still arrives replaces the first
    topic: str  # ≤ 32 URL-safe characters: the push service replaces an undelivered one
    listing_id: int | None  # None for a message about no listing (a test notification)
    price: int | None
    urgency: str = "normal"
    # What the price leaves out, in words beside it where only the price is shown (a digest's
    # line): "(shipping unknown)" — a fee the shop did not name never passes for free.
    price_note: str = ""
    icon: str = ""
    data: dict = field(default_factory=dict)
    # A digest (outbox.digests): one message per row it tells, the rows' ids in the same
    # order, and its id — empty for the message of one row.
    items: tuple[Message, ...] = ()
    rows: tuple[int, ...] = ()
    digest_id: str = ""
    # The ids of earlier digests that told some of these rows and may have reached the
    # person (a re-send after a crash, with other rows than then): an e-mail names their
    # mails in In-Reply-To and References.
    earlier: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {
            "title": self.title,
            "body": self.body,
            "url": self.url,
            "tag": self.tag,
            "topic": self.topic,
            "icon": self.icon,
            "listing": self.listing_id,
            "price": self.price,
            "urgency": self.urgency,
        }


class Channel(Protocol):
    name: str

    def deliver(self, row: Outbox, message: Message) -> Mapping[str, Any] | None:
        """Deliver or raise DeliveryError. May return facts worth keeping (the push service's
        HTTP status…): the dispatcher records them in the sent event's data, as `delivery`."""
        ...


def get_channel(name: str) -> Channel:
    """A new instance of the channel configured as `name` in OUTBOX_CHANNEL_CLASSES."""
    return configured_instance("OUTBOX_CHANNEL_CLASSES", name, what="delivery channel")
