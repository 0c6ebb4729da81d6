"""The outbox changelist's channel and quiet-hours filters list exactly the rows they name,
and a value they do not know is never a server error."""

from __future__ import annotations

import datetime as dt

import pytest

from outbox.models import Reason, Status
from tests.factories import DeviceFactory, OutboxFactory, WatchFactory
from watches.models import Channel

pytestmark = pytest.mark.django_db

CHANGELIST_URL = "/admin/outbox/outbox/"


def listed(client, query: str) -> list[int]:
    response = client.get(f"{CHANGELIST_URL}{query}")
    assert response.status_code == 200
    return sorted(row.pk for row in response.context["cl"].result_list)


def test_channel_filter_lists_exactly_that_channels_rows(admin_client):
    email = [OutboxFactory(channel=Channel.EMAIL).pk for _ in range(2)]
    push = [OutboxFactory(channel=Channel.WEBPUSH).pk for _ in range(3)]

    assert listed(admin_client, "?channel__exact=email") == sorted(email)
    assert listed(admin_client, "?channel__exact=webpush") == sorted(push)
    assert listed(admin_client, "?channel__exact=carrier-pigeon") == []


def test_quiet_hours_filter_held_now_and_devices_that_keep_them(admin_client):
    quiet = DeviceFactory(quiet_start=dt.time(22), quiet_end=dt.time(7))
    loud = DeviceFactory()
    held = OutboxFactory(
        watch=WatchFactory(device=quiet), status=Status.RETRY, reason=Reason.QUIET_HOURS
    )
    sent_quiet = OutboxFactory(
        watch=WatchFactory(device=quiet), status=Status.SENT, reason=Reason.DELIVERED
    )
    OutboxFactory(watch=WatchFactory(device=loud), status=Status.SENT, reason=Reason.DELIVERED)
    # Retrying for another reason: not held for quiet hours.
    OutboxFactory(
        watch=WatchFactory(device=loud), status=Status.RETRY, reason=Reason.DELIVER_SERVER
    )

    assert listed(admin_client, "?quiet_hours=held") == [held.pk]
    assert listed(admin_client, "?quiet_hours=device") == sorted([held.pk, sent_quiet.pk])
    html = admin_client.get(CHANGELIST_URL, headers={"accept-language": "en"}).content.decode()
    assert "By quiet hours" in html and "Held now until the window ends" in html


@pytest.mark.parametrize("query", ["?quiet_hours=nonsense", "?quiet_hours=", "?channel__exact="])
def test_a_filter_value_it_does_not_know_is_no_server_error(admin_client, query):
    OutboxFactory()
    response = admin_client.get(f"{CHANGELIST_URL}{query}")
    assert response.status_code in (200, 302)
