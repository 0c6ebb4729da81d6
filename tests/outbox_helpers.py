"""Small builders for outbox tests: enqueue rows through the real door and read them back."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox
from watches.models import Watch


def enqueue_for(
    watch: Watch,
    *,
    detected_at: dt.datetime | None = None,
    price: int = 900,
    line: str | None = None,
    **payload,
) -> Outbox:
    """Enqueue one detection for `watch` (as polling would) and return its row."""
    detected_at = detected_at or timezone.now()
    snapshot = {"price": price, "effective_price": price, "line": line, **payload}
    inserted = enqueue_many([Detection.for_watch(watch, detected_at, snapshot)])
    assert inserted == 1, "the detection was folded into an existing row"
    return Outbox.objects.get(watch=watch, detected_at=detected_at)


def statuses(*rows: Outbox) -> list[tuple[str, str]]:
    return [Outbox.objects.filter(pk=row.pk).values_list("status", "reason").get() for row in rows]


def push_sent_and_mail_dropped_channel_off(smtp_server) -> dict[str, Outbox]:
    """After a switch to push only: the detection's console row went out, its e-mail row was
    dropped `channel_off` and no mail reached `smtp_server`. Returns the rows by channel."""
    from outbox.models import Reason, Status
    from watches.models import Channel

    rows = {row.channel: row for row in Outbox.objects.all()}
    assert (rows[Channel.EMAIL].status, rows[Channel.EMAIL].reason) == (
        Status.DROPPED,
        Reason.CHANNEL_OFF,
    )
    assert rows[Channel.CONSOLE].status == Status.SENT
    assert smtp_server.messages() == []
    return rows
