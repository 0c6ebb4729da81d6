"""What the outbox did for a person, in plain words: the notification history page.

Every reason a row can end in `dropped` or `failed`, and every reason it can be waiting to try
again, has a sentence here that a person understands ("the item sold out"), never the staff
word. Transparency is the point: seeing why something was withheld is what lets people trust
that a silence means "not worth telling", not "broken".
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from outbox.digests import recorded
from outbox.holds import device_zone
from outbox.models import Outbox, OutboxEvent, Reason, Status
from watches.models import Channel, Device
from watches.points import Breakdown, Facts, as_facts
from watches.triggers import members_count

# Kinds of entry, as the page shows them (also their CSS class). MAYBE_SENT: a row that did
# not end `sent`, but whose message may have left before its dispatcher was lost.
SENT, WITHHELD, ON_THE_WAY, FAILED = "sent", "withheld", "on_the_way", "failed"
MAYBE_SENT = "maybe_sent"

MAYBE_SENT_BECAUSE = _(
    "This may already have reached you: our sending was interrupted just after the message "
    "left, so we could not confirm it, and we did not send it again."
)

# Dropped: we learned we should not send, so we did not.
WITHHELD_BECAUSE: dict[str, Promise] = {
    Reason.WATCH_REMOVED: _("You removed this watch."),
    Reason.WATCH_PAUSED: _("You had paused this watch."),
    Reason.LISTING_PAUSED: _("We stopped tracking this item."),
    Reason.NO_SUBSCRIPTION: _("Notifications were off for this browser."),
    Reason.SUBSCRIPTION_GONE: _(
        "This browser's notification permission had expired. Turn notifications on again in "
        "Settings."
    ),
    Reason.NO_EMAIL: _("There was no confirmed e-mail address to send it to."),
    Reason.CHANNEL_OFF: _("You had chosen in Settings not to be told this way any more."),
    Reason.RECIPIENT_REFUSED: _("Your mail server refused the address. Check it in Settings."),
    Reason.OUT_OF_STOCK: _("The item sold out before we could tell you."),
    Reason.ITEM_NOT_FOUND: _("The shop no longer lists this item."),
    Reason.CONDITION_LOST: _("The price went back up before we could tell you."),
    Reason.POINTS_ENDED: _(
        "The shop's points campaign ended before we could tell you, so after points it was "
        "no longer at your price."
    ),
    Reason.ALREADY_NOTIFIED: _("We had already told you about this price."),
    Reason.SUPERSEDED: _("A newer notification about this item went out instead."),
    Reason.MANUAL: _("Our staff held it back."),
}

# Failed: we tried and gave up (or could never succeed).
FAILED_BECAUSE: dict[str, Promise] = {
    Reason.REFETCH_RATE_LIMITED: _(
        "The shop kept asking us to slow down, so we could not confirm the price in time."
    ),
    Reason.REFETCH_NETWORK: _(
        "The shop could not be reached to confirm the price, even after several tries."
    ),
    Reason.REFETCH_SERVER: _(
        "The shop's site had errors, even after several tries, so we could not confirm the price."
    ),
    Reason.REFETCH_BAD_RESPONSE: _(
        "The shop's answers did not make sense, so we could not confirm the price."
    ),
    Reason.DELIVER_RATE_LIMITED: _("Your browser's push service kept asking us to slow down."),
    Reason.DELIVER_NETWORK: _(
        "Your browser's push service could not be reached, even after several tries."
    ),
    Reason.DELIVER_SERVER: _("Your browser's push service had errors, even after several tries."),
    Reason.DELIVER_REJECTED: _(
        "Your browser's push service refused the message. That was our mistake, not yours."
    ),
    Reason.LEASE_EXPIRED: _("Sending got stuck on our side, even after several tries."),
    Reason.FRESH_VALUE_EXPIRED: _(
        "We could not send it while the price we had just checked was still current, even "
        "after several tries."
    ),
}

# Retry: still on the way, with the hold-up in words.
RETRYING_BECAUSE: dict[str, Promise] = {
    Reason.REFETCH_RATE_LIMITED: _("The shop asked us to slow down; we will try again shortly."),
    Reason.REFETCH_NETWORK: _("The shop could not be reached; we will try again shortly."),
    Reason.REFETCH_SERVER: _("The shop's site had an error; we will try again shortly."),
    Reason.REFETCH_BAD_RESPONSE: _(
        "The shop's answer did not make sense; we will try again shortly."
    ),
    Reason.DELIVER_RATE_LIMITED: _(
        "The push service asked us to slow down; we will try again shortly."
    ),
    Reason.DELIVER_NETWORK: _("The push service could not be reached; we will try again shortly."),
    Reason.DELIVER_SERVER: _("The push service had an error; we will try again shortly."),
    Reason.LEASE_EXPIRED: _("Sending was interrupted on our side; we will try again shortly."),
    Reason.FRESH_VALUE_EXPIRED: _(
        "The price we checked grew too old before it could be sent; we will check it again shortly."
    ),
    Reason.QUIET_HOURS: _("Held until %(time)s (quiet hours)."),
    Reason.BUDGET_UNAVAILABLE: _(
        "We could not check the price just now (a problem on our side); we will try again shortly."
    ),
    Reason.MARKETPLACE_HALTED: _(
        "The shop's site is refusing our price checks until we fix a setting on our side. "
        "This waits, and goes out only if the price still holds once we can check it again."
    ),
}

# The same delivery hold-ups of an e-mail row, in its own words (the tables above speak of
# the push service).
EMAIL_FAILED_BECAUSE: dict[str, Promise] = {
    Reason.DELIVER_NETWORK: _("Our mail server could not be reached, even after several tries."),
    Reason.DELIVER_SERVER: _("The mail server kept saying “later”, even after several tries."),
    Reason.DELIVER_REJECTED: _("The mail server refused our message. That was our mistake."),
}
EMAIL_RETRYING_BECAUSE: dict[str, Promise] = {
    Reason.DELIVER_NETWORK: _("The mail server could not be reached; we will try again shortly."),
    Reason.DELIVER_SERVER: _("The mail server said “later”; we will try again shortly."),
}

_UNKNOWN = _("No reason was recorded.")


@dataclass(frozen=True)
class Entry:
    """One notification as the history page shows it."""

    row: Outbox
    kind: str
    explanation: str  # why withheld / failed / delayed; "" for sent
    price: Decimal | None  # the price told, for sent ones
    body: str  # what the notification said, for sent ones
    at: dt.datetime  # when it was sent, withheld or given up; when noticed, if on the way
    # Held back: the price seen at detection, and the one the re-check found (None when it
    # was held back before asking the shop again) — incl. shipping, or after points for a
    # watch after points, each with its breakdown (HTML; "" without points).
    detected_price: int | None = None
    checked_price: int | None = None
    detected_breakdown: str = ""
    checked_breakdown: str = ""
    # Sent in a digest: how many things it told (this one included); 0 when sent alone.
    digest_size: int = 0

    @property
    def digest_others(self) -> int:
        """The other things the digest this was sent in told."""
        return max(self.digest_size - 1, 0)


def explain(reason: str, status: str, channel: str = "") -> str:
    """The plain words for `reason` on a row of `channel` now in `status`."""
    email = channel == Channel.EMAIL
    if status == Status.DROPPED:
        table = WITHHELD_BECAUSE
    elif status == Status.FAILED:
        table = {**FAILED_BECAUSE, **EMAIL_FAILED_BECAUSE} if email else FAILED_BECAUSE
    elif status == Status.RETRY:
        table = {**RETRYING_BECAUSE, **EMAIL_RETRYING_BECAUSE} if email else RETRYING_BECAUSE
    else:
        return ""
    return str(table.get(reason, _UNKNOWN))


def entries(rows: list[Outbox], device: Device | None = None) -> list[Entry]:
    """The page's entries for `rows` (all `device`'s); one query more for the re-checked
    prices of the held-back ones."""
    dropped = [row.pk for row in rows if row.status == Status.DROPPED]
    checked: dict[int, Facts | None] = {}
    if dropped:
        events = OutboxEvent.objects.filter(
            outbox_id__in=dropped, to_status=Status.DROPPED
        ).values_list("outbox_id", "data")
        for row_id, data in events:
            checked[row_id] = as_facts(data.get("fresh") if isinstance(data, dict) else None)
    zone = device_zone(device) if device is not None else None
    return [entry(row, checked.get(row.pk), zone) for row in rows]


def entry(row: Outbox, checked: Facts | None = None, zone: dt.tzinfo | None = None) -> Entry:
    """`zone`: the device's own, in which its quiet hours were set (default: the site's);
    `checked`: what the re-check found, for a held-back row."""
    status = row.status
    if status in (Status.DROPPED, Status.FAILED) and row.maybe_delivered:
        # Never "withheld" when the phone may have shown it.
        return Entry(row, MAYBE_SENT, str(MAYBE_SENT_BECAUSE), None, "", row.updated_at)
    if status == Status.SENT:
        message = row.sent_message if isinstance(row.sent_message, dict) else {}
        size = (recorded(message) or {}).get("size", 0)
        return Entry(
            row,
            SENT,
            "",
            _price(message.get("price")),
            str(message.get("body") or ""),
            row.sent_at or row.updated_at,
            digest_size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
        )
    if status == Status.DROPPED:
        payload = row.detected_payload if isinstance(row.detected_payload, dict) else {}
        after_points = payload.get("after_points") is True
        members = members_count(row.watch, row.device.lyp_premium)
        seen = _breakdown(as_facts(payload), members)
        again = _breakdown(checked, members)
        return Entry(
            row,
            WITHHELD,
            explain(row.reason, status, row.channel),
            None,
            "",
            row.updated_at,
            detected_price=_price_of(seen, after_points) or _whole(payload.get("effective_price")),
            checked_price=_price_of(again, after_points),
            detected_breakdown=_words(seen, after_points),
            checked_breakdown=_words(again, after_points),
        )
    if status == Status.FAILED:
        return Entry(
            row, FAILED, explain(row.reason, status, row.channel), None, "", row.updated_at
        )
    # pending, sending, retry: on the way
    words = explain(row.reason, status, row.channel)
    if row.reason == Reason.QUIET_HOURS and status == Status.RETRY:
        # The end of the window the person set, in the zone they set it in.
        words = words % {"time": timezone.localtime(row.next_attempt_at, zone).strftime("%H:%M")}
    return Entry(row, ON_THE_WAY, words, None, "", row.detected_at)


def device_rows(device: Device | None) -> QuerySet[Outbox]:
    """Everything the outbox did for `device`, newest first, with watch and listing joined
    (the `outbox_by_device` index serves it)."""
    if device is None:
        return Outbox.objects.none()
    return (
        Outbox.objects.filter(device=device)
        .select_related("watch__listing", "device")
        .defer("detail")
        .order_by("-created_at", "-id")
    )


def _breakdown(facts: Facts | None, members: bool) -> Breakdown | None:
    """The breakdown of a detection snapshot's or a re-check's facts (their prices and
    points as `watches.points.as_facts` reads them)."""
    return None if facts is None else Breakdown.of(facts, members=members)


def _price_of(breakdown: Breakdown | None, after_points: bool) -> int | None:
    """The price the watch compared: after points, or incl. shipping."""
    if breakdown is None:
        return None
    if after_points:
        return breakdown.net
    return Breakdown(breakdown.price, breakdown.shipping).net


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _words(breakdown: Breakdown | None, after_points: bool) -> str:
    """The breakdown in words for a watch after points with points to count; "" else."""
    if breakdown is None or not after_points or not (breakdown.points or breakdown.member_points):
        return ""
    return breakdown.html()


def _price(value: object) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None
