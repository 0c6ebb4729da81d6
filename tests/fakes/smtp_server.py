"""A real SMTP server on 127.0.0.1 (aiosmtpd), as a mail provider's would be, whose answers a
test can script: every mail it accepts is kept as it arrived (parse it with `email`), and a
recipient can be refused with any code (`refuse(address, 550)`), or every mail answered with
a code at DATA (`answer_data(451)`). `StalledServer` accepts connections and never greets: a
client's timeout."""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import socket
import threading
from email.message import EmailMessage

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Handler:
    def __init__(self, server: FakeSmtpServer) -> None:
        self.server = server

    async def handle_RCPT(self, smtp_server, session, envelope, address, rcpt_options):
        code = self.server.refused.get(address.lower())
        if code:
            return f"{code} {'5.1.1 no such user' if code >= 500 else '4.2.1 try again later'}"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, smtp_server, session, envelope):
        if self.server.delay:
            await asyncio.sleep(self.server.delay)
        if self.server.data_code:
            return f"{self.server.data_code} scripted answer"
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.server.lock:
            self.server.received.append((list(envelope.rcpt_tos), message))
        return "250 Message accepted"


class FakeSmtpServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[tuple[list[str], EmailMessage]] = []
        self.refused: dict[str, int] = {}
        self.data_code = 0
        self.delay = 0.0  # seconds before answering DATA: a kill can land mid-send
        self.lock = threading.Lock()
        self._controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port)

    def start(self) -> FakeSmtpServer:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def refuse(self, address: str, code: int) -> None:
        self.refused[address.lower()] = code

    def answer_data(self, code: int) -> None:
        self.data_code = code

    def clear(self) -> None:
        with self.lock:
            self.received.clear()

    def messages(self) -> list[EmailMessage]:
        with self.lock:
            return [message for _, message in self.received]

    def settings(self) -> dict:
        """The Django settings that send mail here."""
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": self.port,
            "EMAIL_USE_TLS": False,
            "EMAIL_USE_SSL": False,
            "EMAIL_HOST_USER": "",
            "EMAIL_HOST_PASSWORD": "",
            "EMAIL_TIMEOUT": 5.0,
        }


class StalledServer:
    """Accepts TCP connections and says nothing: an SMTP client waits for the greeting until
    its timeout."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def text_and_html(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None, "the mail has a plain and an HTML part"
    return text.get_content(), html.get_content()
