"""The e-mail address on /settings/: double opt-in through a real SMTP server on 127.0.0.1,
signed confirmation and unsubscribe links (tampered, expired, stale), the channel choice,
the confirmation limits, bad input, and delete-my-data."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.core import signing
from django.test import Client
from django.utils import timezone

from tests.factories import device_with_cookie
from watches import email_address
from watches.models import Device, NotifyVia

pytestmark = pytest.mark.django_db


def confirmation_path(server) -> str:
    text = server.messages()[-1].get_body(preferencelist=("plain",)).get_content()
    link = re.search(r"https?://[^/\s]+(/email/confirm/[^\s]+/)", text)
    assert link is not None, text
    return link.group(1)


def test_adding_an_address_mails_a_link_that_confirms_it(client, smtp_server):
    device, _ = device_with_cookie(client)

    response = client.post("/settings/email", {"email": "Me@Mail.Example"})

    assert response.status_code == 302
    device.refresh_from_db()
    assert device.email == "Me@mail.example" and device.email_confirmed_at is None
    [mail] = smtp_server.messages()
    assert mail["To"].strip() == "Me@mail.example"
    assert 'data-email-status="pending"' in client.get("/settings/").content.decode()

    path = confirmation_path(smtp_server)
    page = client.get(path)
    assert page.status_code == 200
    device.refresh_from_db()
    assert device.email_confirmed_at is None  # opening the link (a scanner, too) asks only

    response = client.post(path)
    assert response.status_code == 302
    device.refresh_from_db()
    assert device.email_active
    assert 'data-email-status="confirmed"' in client.get("/settings/").content.decode()


def test_the_confirmation_link_points_at_site_url_whatever_host_the_request_named(
    client, smtp_server, settings
):
    """The link carries the signed token: under a wildcard ALLOWED_HOSTS a request's Host is
    whatever its sender chose, and must not decide where a victim's mail sends them."""
    settings.ALLOWED_HOSTS = ["*"]
    settings.SITE_URL = "https://yasugoro.example"

    response = client.post(
        "/settings/email", {"email": "victim@mail.example"}, HTTP_HOST="attacker.example"
    )

    assert response.status_code == 302
    [mail] = smtp_server.messages()
    text = mail.get_body(preferencelist=("plain",)).get_content()
    link = re.search(r"https?://\S+/email/confirm/\S+/", text)
    assert link is not None, text
    assert link.group(0).startswith("https://yasugoro.example/email/confirm/"), link.group(0)


def test_confirmation_works_from_another_browser_without_the_device_cookie(client, smtp_server):
    device, _ = device_with_cookie(client)
    client.post("/settings/email", {"email": "me@mail.example"})
    path = confirmation_path(smtp_server)

    other = Client(enforce_csrf_checks=True)
    page = other.get(path)
    token = page.cookies["csrftoken"].value
    assert other.post(path, {"csrfmiddlewaretoken": token}).status_code == 302
    device.refresh_from_db()
    assert device.email_active


@pytest.mark.parametrize("tamper", ["flip", "cut", "other-salt"])
def test_tampered_confirmation_token_is_refused_and_changes_nothing(client, smtp_server, tamper):
    device, _ = device_with_cookie(client, email="me@mail.example")
    token = email_address.confirm_token(device)
    if tamper == "flip":
        token = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    elif tamper == "cut":
        token = token[:-5]
    else:
        token = email_address.unsubscribe_token(device.pk, device.email)

    assert client.get(f"/email/confirm/{token}/").status_code == 400
    assert client.post(f"/email/confirm/{token}/").status_code == 400
    device.refresh_from_db()
    assert device.email_confirmed_at is None


def test_expired_confirmation_token_is_refused_and_changes_nothing(client, settings):
    settings.EMAIL_CONFIRM_HOURS = 48
    device, _ = device_with_cookie(client, email="me@mail.example")
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        token = email_address.confirm_token(device)
    with time_machine.travel(start + dt.timedelta(hours=48, seconds=1), tick=False):
        response = client.post(f"/email/confirm/{token}/")
    assert response.status_code == 400
    assert b"expired" in response.content
    device.refresh_from_db()
    assert device.email_confirmed_at is None


def test_a_link_for_a_previous_address_does_not_confirm_the_new_one(client, smtp_server):
    device, _ = device_with_cookie(client, email="old@mail.example")
    old_token = email_address.confirm_token(device)
    client.post("/settings/email", {"email": "new@mail.example"})

    client.post(f"/email/confirm/{old_token}/")

    device.refresh_from_db()
    assert device.email == "new@mail.example" and device.email_confirmed_at is None


def test_unsubscribe_get_asks_and_post_without_cookie_or_csrf_removes(client):
    device, _ = device_with_cookie(
        client, email="me@mail.example", email_confirmed_at=timezone.now()
    )
    path = f"/email/unsubscribe/{email_address.unsubscribe_token(device.pk, device.email)}/"
    anonymous = Client(enforce_csrf_checks=True)

    assert anonymous.get(path).status_code == 200
    device.refresh_from_db()
    assert device.email_active

    response = anonymous.post(path, {"List-Unsubscribe": "One-Click"})
    assert response.status_code == 200
    device.refresh_from_db()
    assert device.email == "" and not device.email_active
    # Again: still a 200, nothing left to change.
    assert anonymous.post(path).status_code == 200


def test_tampered_or_expired_unsubscribe_token_is_refused_and_changes_nothing(settings):
    device, _ = device_with_cookie(email="me@mail.example", email_confirmed_at=timezone.now())
    anonymous = Client(enforce_csrf_checks=True)
    token = email_address.unsubscribe_token(device.pk, device.email)
    forged = signing.dumps({"d": device.pk, "a": device.email}, salt="something else")
    assert anonymous.post(f"/email/unsubscribe/{token[:-3]}xyz/").status_code == 400
    assert anonymous.post(f"/email/unsubscribe/{forged}/").status_code == 400
    later = timezone.now() + dt.timedelta(days=settings.EMAIL_UNSUBSCRIBE_DAYS, seconds=1)
    with time_machine.travel(later, tick=False):
        assert anonymous.post(f"/email/unsubscribe/{token}/").status_code == 400
    device.refresh_from_db()
    assert device.email_active


def test_unsubscribe_is_the_only_csrf_exempt_email_view(client):
    device, _ = device_with_cookie(email="me@mail.example")
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = client.cookies
    token = email_address.confirm_token(device)
    assert strict.post(f"/email/confirm/{token}/").status_code == 403
    assert strict.post("/settings/email", {"email": "x@mail.example"}).status_code == 403
    assert strict.post("/settings/channels", {"notify_via": "email"}).status_code == 403


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"email": ""},
        {"email": "not an address"},
        {"email": "a@b"},
        {"email": "x" * 250 + "@mail.example"},
        {"email": "me@mail.example\r\nBcc: victim@mail.example"},
    ],
)
def test_bad_address_is_a_400_with_a_message_and_writes_nothing(client, smtp_server, data):
    response = client.post("/settings/email", data)
    assert response.status_code == 400
    assert b'class="errorlist' in response.content
    assert Device.objects.count() == 0
    assert smtp_server.messages() == []


NOT_PUBLIC = "not a public mail domain"
NOT_VALID = "Enter a valid e-mail address"
NOT_ENCODABLE = "it holds a character no mail domain can"


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("a@[127.0.0.1]", NOT_PUBLIC),
        ("a@[::1]", NOT_PUBLIC),
        ("a@localhost", NOT_PUBLIC),
        ("a@printer.localhost", NOT_PUBLIC),
        ("a@Mail.LOCALHOST", NOT_PUBLIC),
        ("a@nowhere.invalid", NOT_PUBLIC),
        ("a@nas.local", NOT_PUBLIC),
        ("a@mail.corp.internal", NOT_PUBLIC),
        ("a@router.home.arpa", NOT_PUBLIC),
        ("a@hidden.onion", NOT_PUBLIC),
        ("a@name.alt", NOT_PUBLIC),
        # Django's own validator already refuses these.
        ("a@[IPv6:2001:db8::1]", NOT_VALID),
        ("a@10.0.0.1", NOT_VALID),
        ("a@intranet", NOT_VALID),
        # Django's validator takes it, but IDNA cannot encode the invisible U+200E: the
        # confirmation mail would fail once the address was stored.
        ("me@\u200email.example", NOT_ENCODABLE),
    ],
)
def test_an_address_no_public_mail_reaches_is_refused_in_the_page(
    client, smtp_server, address, message
):
    device, _ = device_with_cookie(client)
    response = client.post("/settings/email", {"email": address})
    assert response.status_code == 400
    assert message in response.content.decode()
    device.refresh_from_db()
    assert device.email == ""
    assert smtp_server.messages() == []


@pytest.mark.parametrize(
    ("email", "said"),
    [
        ("me@\u200email.example", "メールのドメインに使えない文字"),
        ("a@[127.0.0.1]", "公開されたメールのドメインではありません"),
    ],
)
def test_the_refusal_of_an_address_speaks_japanese(client, smtp_server, email, said):
    device_with_cookie(client)
    response = client.post("/settings/email", {"email": email}, headers={"accept-language": "ja"})
    assert response.status_code == 400
    assert said in response.content.decode()


@pytest.mark.parametrize(
    "address", ["a@mail.example", "a@gmail.com", "a@例え.jp", "a@mail.test", "a@sub.co.jp"]
)
def test_an_address_at_a_named_domain_is_taken(client, smtp_server, address):
    device, _ = device_with_cookie(client)
    response = client.post("/settings/email", {"email": address})
    assert response.status_code == 302
    device.refresh_from_db()
    assert device.email == address


@pytest.mark.parametrize("value", ["", "sms", "push,email", "x" * 500])
def test_bad_channel_choice_is_a_400_and_writes_nothing(client, value):
    device, _ = device_with_cookie(client)
    response = client.post("/settings/channels", {"notify_via": value})
    assert response.status_code == 400
    assert b'class="errorlist' in response.content
    device.refresh_from_db()
    assert device.notify_via == NotifyVia.PUSH


def test_channel_choice_is_saved(client):
    device, _ = device_with_cookie(client)
    assert client.post("/settings/channels", {"notify_via": "both"}).status_code == 302
    device.refresh_from_db()
    assert device.notify_via == NotifyVia.BOTH


def test_confirmation_mails_are_limited_per_device(client, smtp_server, settings):
    settings.EMAIL_CONFIRM_PER_HOUR = 2
    device, _ = device_with_cookie(client)
    for n in range(2):
        assert client.post("/settings/email", {"email": f"a{n}@mail.example"}).status_code == 302
    response = client.post("/settings/email", {"email": "a9@mail.example"})
    assert response.status_code == 429
    device.refresh_from_db()
    assert device.email == "a1@mail.example"
    assert len(smtp_server.messages()) == 2


def test_confirmation_mails_are_limited_per_address(smtp_server, settings):
    settings.EMAIL_CONFIRM_PER_HOUR = 2
    for _ in range(2):
        client = Client()
        device_with_cookie(client)
        assert client.post("/settings/email", {"email": "victim@mail.example"}).status_code == 302
    client = Client()
    device, _ = device_with_cookie(client)
    # The same address in other letter case is the same mailbox.
    assert client.post("/settings/email", {"email": "VICTIM@mail.example"}).status_code == 429
    device.refresh_from_db()
    assert device.email == ""
    assert len(smtp_server.messages()) == 2


def test_a_mail_server_that_is_down_is_a_message_not_a_500(client, settings):
    from tests.fakes.smtp_server import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    device_with_cookie(client)
    response = client.post("/settings/email", {"email": "me@mail.example"}, follow=True)
    assert response.status_code == 200
    assert b"could not send the confirmation mail" in response.content


def test_removing_and_delete_my_data_remove_the_address(client):
    device, _ = device_with_cookie(
        client, email="me@mail.example", email_confirmed_at=timezone.now()
    )
    assert client.post("/settings/email", {"remove": "1"}).status_code == 302
    device.refresh_from_db()
    assert device.email == "" and device.email_confirmed_at is None

    Device.objects.filter(pk=device.pk).update(email="me@mail.example")
    client.post("/settings/delete", {"confirm": "yes"})
    assert not Device.objects.filter(email="me@mail.example").exists()


def test_the_confirmation_mail_carries_nothing_a_visitor_typed_but_the_address(client, smtp_server):
    device_with_cookie(client)
    client.post("/settings/email", {"email": "me@mail.example", "note": "BUY CHEAP PILLS"})
    [mail] = smtp_server.messages()
    assert "PILLS" not in mail.as_string()
