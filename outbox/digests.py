"""Digests: the rows of one batch sendable to one device on one channel go out as ONE
notification ("3 things you watch are cheap now", each item with its fresh price).

A digest is only a way of delivering: every row keeps its own re-check, its own message (the
item), its own outcome and its own baseline. `plan` runs after the re-check, so a row that
failed it is simply not in the digest; a row alone in its group is sent exactly as before.

Its id is derived from the rows it tells (`digest_id`): the same rows sent again after a
crash are the same digest, so the e-mail's `Message-ID` repeats and mail clients fold the
duplicate. A Web Push digest carries one `Topic` and notification `tag` per device
(`DIGEST_TAG`): the push service replaces an undelivered earlier digest, the browser a shown
one, instead of stacking them; its link opens the history page, which lists every item.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import replace

from django.utils import translation
from django.utils.translation import ngettext

from common.text import clip
from outbox.channels.base import Message
from outbox.messages import yen
from outbox.models import Outbox

# The Topic and tag of every digest (a subscription is one device's): a newer digest
# replaces one not yet seen rather than queueing beside it. A group too big for one push
# message is split; its later parts are "digest-2", "digest-3"…, so they never replace
# each other.
DIGEST_TAG = "digest"
DIGEST_URL = "/notifications/"
# The most items one digest carries, per channel (none: all of them). A push message holds
# about 3 KB of JSON: 8 items fit whole whatever their names (`outbox.channels.webpush`),
# so no row is ever recorded `sent` without its item in the message.
MAX_ITEMS: dict[str, int] = {"webpush": 8}
# Characters of an item's name on a digest's line: the body lists them all.
_LINE_TITLE = 40


def plan(to_send: list[tuple[Outbox, Message]]) -> list[tuple[Outbox, Message]]:
    """The deliveries for a batch's sendable rows: one per device and channel — a row alone
    keeps its own message; several become a digest, delivered through their first row (the
    channel reads the device from it), in the order they came.

    A row that may have been delivered already (a crash between its delivery and its
    recording) goes out in the form it went out in then (`earlier_form`), so that the device
    replaces what it showed instead of showing the item twice: alone with its own Topic and
    tag, or in the part of a digest with that digest's Topic and tag — with the rows that
    come with it now, or as a digest of one."""
    groups: dict[tuple[int, str], list[tuple[Outbox, Message]]] = defaultdict(list)
    for row, message in to_send:
        groups[(row.device_id, row.channel)].append((row, message))
    sends = []
    for (_, channel), group in groups.items():
        size = MAX_ITEMS.get(channel) or len(group)
        parts: dict[int, list[int]] = defaultdict(list)  # part -> indexes into group
        fresh = []
        for index, (row, message) in enumerate(group):
            form = earlier_form(row)
            if form is None:
                fresh.append(index)
            elif isinstance(form, str):  # ALONE
                sends.append((row, message))
            else:
                parts[_part(form["tag"])].append(index)
        part = 0
        for index in fresh:
            while len(parts[part]) >= size:
                part += 1
            parts[part].append(index)
        for part, indexes in sorted(parts.items()):
            send = _send([group[index] for index in sorted(indexes)], part)
            if send is not None:
                sends.append(send)
    return sends


def regroup(planned: Message, still: list[tuple[Outbox, Message]]) -> tuple[Outbox, Message] | None:
    """A planned delivery (`planned`: a row's message or a digest) once its rows were judged
    again right before it is handed over: `still` are those that still hold, each with its
    fresh message, sent in the planned form (`_send`): a digest keeps its part."""
    if not planned.items:
        return still[0] if still else None
    return _send(still, _part(planned.tag))


# The form of a row that may have been delivered alone (`earlier_form`).
ALONE = "alone"


def earlier_form(row: Outbox) -> dict | str | None:
    """How a row that may have been delivered already went out: the digest it was in
    (`{"id", "tag"}`, written with its intent), or ALONE; None when nothing of it may have
    reached the person."""
    if getattr(row, "maybe_delivered", False) is not True:
        return None
    facts = row.attempt_digest
    return facts if isinstance(facts, dict) and facts.get("tag") else ALONE


def _send(items: list[tuple[Outbox, Message]], part: int) -> tuple[Outbox, Message] | None:
    """`items` of one device and channel as one delivery of digest part `part`: a row alone
    sends its own message unless it was in a digest before (then a digest of one)."""
    if not items:
        return None
    if len(items) == 1 and earlier_form(items[0][0]) is None:
        return items[0]
    lead = items[0][0]
    earlier = {form["id"] for row, _ in items if isinstance(form := earlier_form(row), dict)}
    message = build_digest(items, lead.device.language, part)
    return lead, replace(message, earlier=tuple(sorted(earlier - {message.digest_id})))


def _part(tag: str) -> int:
    """The part of a split group a digest's tag names (`digest_tag`): 0 for `digest`."""
    number = tag.removeprefix(f"{DIGEST_TAG}-")
    return int(number) - 1 if number != tag and number.isascii() and number.isdigit() else 0


def digest_id(row_ids: list[int] | tuple[int, ...]) -> str:
    """Stable for a set of rows, whatever their order: `d<lowest id>-<8 hex digits>`."""
    ids = sorted(row_ids)
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:8]
    return f"d{ids[0]}-{digest}"


def build_digest(
    group: list[tuple[Outbox, Message]], language: str = "ja", part: int = 0
) -> Message:
    """One message telling every item of `group` (each its row's own message, built from
    its fresh value), in the device's language; `part` numbers the pieces of a group split
    by MAX_ITEMS (its Topic and tag)."""
    items = tuple(message for _, message in group)
    rows = tuple(row.id for row, _ in group)
    with translation.override(language):
        title = ngettext(
            "%(count)d thing you watch is cheap now",
            "%(count)d things you watch are cheap now",
            len(items),
        ) % {"count": len(items)}
    body = "\n".join(line(item) for item in items)
    return Message(
        title=title,
        body=body,
        url=DIGEST_URL,
        tag=digest_tag(part),
        topic=digest_tag(part),
        listing_id=None,
        price=None,
        urgency="high" if any(item.urgency == "high" for item in items) else "normal",
        items=items,
        rows=rows,
        digest_id=digest_id(rows),
    )


def digest_tag(part: int = 0) -> str:
    """`digest`, then `digest-2`, `digest-3`… for the later parts of a split group."""
    return DIGEST_TAG if part == 0 else f"{DIGEST_TAG}-{part + 1}"


def line(item: Message) -> str:
    """An item as a digest's body lists it: its name, then its fresh price (and what that
    price leaves out: "(shipping unknown)")."""
    said = f"{clip(item.title, _LINE_TITLE)} {yen(item.price)}"
    return f"{said} {item.price_note}" if item.price_note else said


def membership(message: Message, row_id: int) -> dict | None:
    """What row `row_id` of a digest records of it (event data and `sent_message`), or None
    for the message of one row. The first row (the lowest id, named in the digest's id)
    keeps the list of every row; the others its id and size — a list in each row would
    grow with the square of a digest's size."""
    if not message.digest_id:
        return None
    facts: dict = {"id": message.digest_id, "size": len(message.rows)}
    if row_id == min(message.rows):
        facts["rows"] = list(message.rows)
    return facts


def recorded(data: object) -> dict | None:
    """The digest facts a row recorded (`membership`) in its `sent_message` or an event's
    data, or None: a row sent alone, or data of another shape."""
    facts = data.get("digest") if isinstance(data, dict) else None
    return facts if isinstance(facts, dict) else None


def first_row(digest: str) -> int | None:
    """The id of the row that lists a digest's rows, read from the digest's id."""
    head = digest.partition("-")[0]
    number = head[1:]
    return int(number) if head.startswith("d") and number.isascii() and number.isdigit() else None
