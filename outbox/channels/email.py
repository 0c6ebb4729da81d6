"""The e-mail channel: one notification, one mail, through Django's mail framework (SMTP in
production, the console under `make run`).

Each mail has a text and an HTML part in the device's language, a `Message-ID` fixed by the
outbox row — or, for a digest of several rows (`outbox.digests`), by the digest's rows — (a
re-send after a crash is the same message, which mail clients fold; a digest re-sent with
other rows than then answers the earlier mail, In-Reply-To and References, so it shows in
that thread, after it), and the
RFC 8058 headers `List-Unsubscribe` (a signed URL) and `List-Unsubscribe-Post:
List-Unsubscribe=One-Click`, with the same link in the body.

What the SMTP server says becomes a DeliveryError kind (the dispatcher's table turns kinds
into outcomes):

    5xx on the recipient (RCPT TO)        BOUNCED   dropped, counted toward disabling the address
    4xx anywhere                          SERVER    transient: retry
    refused, reset, dropped connections,
    timeouts, an answer that is not SMTP  NETWORK   retry
    5xx on the sender, the data, the
    login                                 REJECTED  our configuration or our mail: failed

A connection dropped, a timeout or an unreadable answer once the mail was being handed over
(after the connection, STARTTLS and the login) may come after the server took the mail: the
error says `maybe_delivered`, and the retry goes out in the same form, under the same
Message-ID (docs/decisions/0066-crash-resend-form.md). A server that answered with a code
did not take it; one never reached was not asked.
"""

from __future__ import annotations

import contextlib
import smtplib
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from common.text import clip
from outbox.channels.base import DeliveryError, DeliveryKind, Message
from watches.services import unsubscribe_token

if TYPE_CHECKING:
    from outbox.models import Outbox

# How much of an SMTP server's answer staff read in the row's detail.
_ANSWER_LIMIT = 300


class EmailChannel:
    name = "email"

    def deliver(self, row: Outbox, message: Message) -> dict:
        # Only rows whose device has a confirmed, working address get here
        # (outbox.recheck.guard drops the others `no_email`).
        mail = build_mail(row, message)
        connection = get_connection(fail_silently=False)
        try:
            connection.open()  # connect, STARTTLS, login: nothing of the mail yet
        except Exception as exc:
            # A refused STARTTLS or login leaves the socket open behind Django's backend.
            with contextlib.suppress(Exception):
                connection.close()
            raise classify(exc) from None
        try:
            connection.send_messages([mail])
        except Exception as exc:
            raise classify(exc, handing_over=True) from None
        finally:
            # The mail's fate is settled by now: a failed QUIT changes nothing of it.
            with contextlib.suppress(Exception):
                connection.close()
        return {"message_id": mail.extra_headers["Message-ID"]}


def message_id(row: Outbox, message: Message | None = None) -> str:
    """Stable per outbox row: a second delivery of the same row is the same message. A
    digest's is its id's, which the rows it tells decide: the same rows sent again after a
    crash are the same mail."""
    if message is not None and message.digest_id:
        return f"<outbox-digest-{message.digest_id}@{_domain()}>"
    return f"<outbox-{row.pk}@{_domain()}>"


def earlier_ids(message: Message) -> list[str]:
    """The Message-IDs of earlier digests this mail tells rows of again (a re-send after a
    crash, with other rows than then): it answers them (In-Reply-To, References), so a mail
    client shows it in their thread, after them, rather than as a new message."""
    return [f"<outbox-digest-{digest}@{_domain()}>" for digest in message.earlier]


def build_mail(row: Outbox, message: Message) -> EmailMultiAlternatives:
    device = row.device
    unsubscribe_url = settings.SITE_URL + reverse(
        "email-unsubscribe", args=[unsubscribe_token(device.pk, device.email)]
    )
    context = {
        "message": message,
        "url": settings.SITE_URL + message.url,
        "unsubscribe_url": unsubscribe_url,
        "settings_url": settings.SITE_URL + reverse("device-settings"),
    }
    template = "digest" if message.items else "notification"
    if message.items:
        context["items"] = [(item, settings.SITE_URL + item.url) for item in message.items]
    with translation.override(device.language):
        text = render_to_string(f"outbox/email/{template}.txt", context)
        html = render_to_string(f"outbox/email/{template}.html", context)
    subject = message.title if message.items else f"{message.title} — {message.body}"
    mail = EmailMultiAlternatives(
        # A header is one line: a name with a line break (the marketplace's own text) would
        # make Django refuse the mail, every retry alike.
        subject=clip(" ".join(subject.split()), 150),
        body=text,
        to=[device.email],
        headers={
            "Message-ID": message_id(row, message),
            "List-Unsubscribe": f"<{unsubscribe_url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
            # Mail clients and servers that know it send no out-of-office replies to this.
            "Auto-Submitted": "auto-generated",
        },
    )
    earlier = earlier_ids(message)
    if earlier:
        mail.extra_headers["In-Reply-To"] = " ".join(earlier)
        mail.extra_headers["References"] = " ".join(earlier)
    mail.attach_alternative(html, "text/html")
    return mail


def classify(exc: BaseException, handing_over: bool = False) -> DeliveryError:
    """One SMTP failure as a DeliveryError kind (see the module's table); while `handing_over`
    the mail, one with no answer from the server is `maybe_delivered`."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        # One recipient per mail: its (code, answer) is the refusal.
        code, answer = next(iter(exc.recipients.values()), (0, b""))
        kind = DeliveryKind.BOUNCED if 500 <= code < 600 else DeliveryKind.SERVER
        return DeliveryError(kind, _said("recipient refused", code, answer), status_code=code)
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return DeliveryError(
            DeliveryKind.NETWORK, f"mail server disconnected: {exc}", maybe_delivered=handing_over
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        code = exc.smtp_code
        if 400 <= code < 500:
            return DeliveryError(DeliveryKind.SERVER, _said("mail server", code, exc.smtp_error))
        if not 500 <= code < 600:
            # Not an SMTP answer at all (smtplib's -1: a line it could not read, such as a
            # proxy answering in HTTP): the way to the server, not our mail, so try again.
            return DeliveryError(
                DeliveryKind.NETWORK,
                _said("mail server", code, exc.smtp_error),
                maybe_delivered=handing_over,
            )
        return DeliveryError(
            DeliveryKind.REJECTED, _said("mail server", code, exc.smtp_error), status_code=code
        )
    if isinstance(exc, TimeoutError):
        return DeliveryError(
            DeliveryKind.NETWORK, "mail server timed out", maybe_delivered=handing_over
        )
    if isinstance(exc, OSError | smtplib.SMTPException):
        return DeliveryError(
            DeliveryKind.NETWORK,
            f"mail server unreachable: {type(exc).__name__}",
            maybe_delivered=handing_over,
        )
    return DeliveryError(DeliveryKind.SERVER, f"unexpected {type(exc).__name__}: {exc}")


def _said(what: str, code: int, answer: bytes | str) -> str:
    if isinstance(answer, bytes):
        answer = answer.decode("utf-8", "replace")
    return clip(f"{what}: {code} {' '.join(answer.split())}", _ANSWER_LIMIT)


def _domain() -> str:
    return urlsplit(settings.SITE_URL).hostname or "localhost"
