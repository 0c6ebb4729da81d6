"""A development channel: the message goes to the log, so `make run` shows sends without a
browser subscription."""

from __future__ import annotations

import logging

from outbox.channels.base import Message

log = logging.getLogger("outbox.console")


class ConsoleChannel:
    name = "console"

    def deliver(self, row, message: Message) -> dict | None:
        log.info(
            "notify device=%s row=%s %s — %s", row.device_id, row.pk, message.title, message.body
        )
        return None
