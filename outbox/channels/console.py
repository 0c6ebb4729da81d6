"""A development channel: the message goes to the log, so `make run` shows sends without a
browser subscription."""

from __future__ import annotations

import logging

from outbox.channels.base import Message

log = logging.getLogger("outbox.console")


class ConsoleChannel:
    name = "console"

    def deliver(self, row, message: Message) -> dict | None:
        if message.items:
            log.info(
                "notify device=%s digest=%s rows=%s %s — %s",
                row.device_id,
                message.digest_id,
                ",".join(map(str, message.rows)),
                message.title,
                message.body.replace("\n", " · "),
            )
            return None
        log.info(
            "notify device=%s row=%s %s — %s", row.device_id, row.pk, message.title, message.body
        )
        return None
