"""Quiet hours: the device's window on /settings/ (validation, bad input), the window itself
at its edges in Tokyo — across midnight and not — and the dispatcher holding a row until the
window's end, then re-checking it like any other row."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from demo.market import set_product
from outbox.dispatch import run_cycle
from outbox.enqueue import detections_for, enqueue, enqueue_many
from outbox.holds import quiet_until
from outbox.models import Outbox, OutboxEvent, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, device_with_cookie
from tests.outbox_helpers import push_sent_and_mail_dropped_channel_off
from watches.models import Channel, Device, NotifyVia
from watches.polling.poll import poll_batch

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")


def tokyo(day: int, hour: int, minute: int) -> dt.datetime:
    return dt.datetime(2026, 12, day, hour, minute, tzinfo=TOKYO)


OVERNIGHT = {"quiet_start": dt.time(22, 0), "quiet_end": dt.time(7, 0)}
LUNCH = {"quiet_start": dt.time(12, 0), "quiet_end": dt.time(13, 30)}


@pytest.mark.parametrize(
    ("window", "now", "until"),
    [
        (OVERNIGHT, tokyo(1, 21, 59), None),
        (OVERNIGHT, tokyo(1, 22, 0), tokyo(2, 7, 0)),
        (OVERNIGHT, tokyo(1, 23, 59), tokyo(2, 7, 0)),
        (OVERNIGHT, tokyo(2, 0, 0), tokyo(2, 7, 0)),
        (OVERNIGHT, tokyo(2, 6, 59), tokyo(2, 7, 0)),
        (OVERNIGHT, tokyo(2, 7, 0), None),
        (LUNCH, tokyo(1, 11, 59), None),
        (LUNCH, tokyo(1, 12, 0), tokyo(1, 13, 30)),
        (LUNCH, tokyo(1, 13, 29), tokyo(1, 13, 30)),
        (LUNCH, tokyo(1, 13, 30), None),
        (LUNCH, tokyo(1, 23, 0), None),
    ],
)
def test_the_window_at_its_edges_in_tokyo(window, now, until):
    device = Device(time_zone="Asia/Tokyo", **window)
    assert quiet_until(device, now.astimezone(dt.UTC)) == (until and until.astimezone(dt.UTC))


def test_the_window_is_read_in_the_devices_own_zone():
    device = Device(time_zone="Europe/London", **OVERNIGHT)
    # 07:30 in Tokyo is 22:30 the evening before in London: inside London's night.
    ends = quiet_until(device, tokyo(2, 7, 30))
    assert ends == dt.datetime(2026, 12, 2, 7, 0, tzinfo=zoneinfo.ZoneInfo("Europe/London"))


def test_no_window_no_hold():
    assert quiet_until(Device(), tokyo(1, 23, 0)) is None


def due_row(device, *, price=1000, target=1200):
    listing = ListingFactory(price=price)
    watch = WatchFactory(device=device, listing=listing, target_price=target)
    assert enqueue(watch, timezone.now(), {"value": str(price), "line": str(target)})
    return watch, Outbox.objects.get(watch=watch)


def test_a_row_due_in_the_window_waits_for_its_end_with_no_retry_counted(recording_channel):
    with time_machine.travel(tokyo(1, 22, 30), tick=False):
        device = DeviceFactory(**OVERNIGHT)
        watch, row = due_row(device)
        set_product(watch.listing.item_code, price=900)  # nobody asks the shop while held
        result = run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.RETRY, Reason.QUIET_HOURS)
    assert row.next_attempt_at == tokyo(2, 7, 0)
    assert row.retry_count == 0 and row.claimed_by == ""
    assert result.by_status[Status.RETRY] == 1
    assert OutboxEvent.objects.filter(outbox=row, reason=Reason.QUIET_HOURS).count() == 1
    assert recording_channel.delivered == []
    watch.listing.refresh_from_db()
    assert watch.listing.price == 1000, "a held row is not re-fetched"

    # Not due again before the window ends…
    with time_machine.travel(tokyo(2, 6, 59), tick=False):
        assert run_cycle().claimed == 0
    # …and at its end it is re-fetched, re-checked and sent with the fresh price.
    with time_machine.travel(tokyo(2, 7, 0), tick=False):
        run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT
    assert row.sent_message["price"] == 900
    assert row.retry_count == 0


def test_a_sale_that_ended_overnight_is_dropped_at_the_windows_end(recording_channel):
    with time_machine.travel(tokyo(1, 23, 0), tick=False):
        watch, row = due_row(DeviceFactory(**OVERNIGHT), price=1000, target=1200)
        run_cycle()
    set_product(watch.listing.item_code, price=1500)
    with time_machine.travel(tokyo(2, 7, 0), tick=False):
        run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert recording_channel.delivered == []


def test_a_row_at_the_retry_cap_is_held_not_failed(recording_channel, settings):
    settings.OUTBOX_MAX_RETRY = 2
    with time_machine.travel(tokyo(1, 23, 0), tick=False):
        _, row = due_row(DeviceFactory(**OVERNIGHT))
        Outbox.objects.filter(pk=row.pk).update(retry_count=2)
        run_cycle()
    row.refresh_from_db()
    assert (row.status, row.reason, row.retry_count) == (Status.RETRY, Reason.QUIET_HOURS, 2)


def told_by(client, notify_via: str) -> Device:
    """A console device with a confirmed address, told by `notify_via`, quiet overnight; its
    cookie on `client`."""
    device, _ = device_with_cookie(
        client,
        channel=Channel.CONSOLE,
        notify_via=notify_via,
        email="night@mail.example",
        email_confirmed_at=timezone.now(),
        **OVERNIGHT,
    )
    return device


def switch_to(client, notify_via: str) -> None:
    response = client.post(reverse("device-notify-via"), {"notify_via": notify_via})
    assert response.status_code == 302


def test_a_channel_switched_off_overnight_is_not_used_at_the_windows_end(
    client, recording_channel, smtp_server
):
    with time_machine.travel(tokyo(1, 22, 30), tick=False):
        watch = WatchFactory(
            device=told_by(client, NotifyVia.BOTH), listing=ListingFactory(price=1000)
        )
        detected = {"value": "1000", "line": str(watch.target_price)}
        assert enqueue_many(detections_for(watch, timezone.now(), detected)) == 2
        run_cycle()
        assert set(Outbox.objects.values_list("reason", flat=True)) == {Reason.QUIET_HOURS}
        switch_to(client, NotifyVia.PUSH)
    with time_machine.travel(tokyo(2, 7, 0), tick=False):
        run_cycle()
    rows = push_sent_and_mail_dropped_channel_off(smtp_server)
    assert [pk for pk, _ in recording_channel.delivered] == [rows[Channel.CONSOLE].pk]


def test_a_switch_to_email_overnight_moves_what_still_holds_to_email(
    client, recording_channel, smtp_server
):
    with time_machine.travel(tokyo(1, 22, 30), tick=False):
        listing = ListingFactory(price=1500)
        WatchFactory(device=told_by(client, NotifyVia.PUSH), listing=listing, target_price=1200)
        set_product(listing.item_code, price=1100)
        assert poll_batch(listing.source, [listing.pk]).enqueued == 1
        run_cycle()
        switch_to(client, NotifyVia.EMAIL)
    with time_machine.travel(tokyo(2, 7, 0), tick=False):
        run_cycle()
        push = Outbox.objects.get(channel=Channel.CONSOLE)
        assert (push.status, push.reason) == (Status.DROPPED, Reason.CHANNEL_OFF)
        # Not lost: the watch was never told, so the next poll finds it again, for e-mail.
        assert poll_batch(listing.source, [listing.pk]).enqueued == 1
        run_cycle()
    mail = Outbox.objects.get(channel=Channel.EMAIL)
    assert mail.status == Status.SENT, (mail.reason, mail.detail)
    assert [m["To"].strip() for m in smtp_server.messages()] == ["night@mail.example"]
    assert recording_channel.delivered == []


def test_outside_the_window_rows_go_out_at_once(recording_channel):
    with time_machine.travel(tokyo(1, 21, 59), tick=False):
        _, row = due_row(DeviceFactory(**OVERNIGHT))
        run_cycle()
    row.refresh_from_db()
    assert row.status == Status.SENT


def test_the_history_page_says_held_until_the_windows_end(client, recording_channel):
    with time_machine.travel(tokyo(1, 22, 30), tick=False):
        device, _ = device_with_cookie(client, channel=Channel.CONSOLE, **OVERNIGHT)
        due_row(device)
        run_cycle()
        page = client.get("/notifications/").content.decode()
    assert "Held until 07:00 (quiet hours)." in page


def test_the_history_page_gives_the_windows_end_in_the_devices_own_zone(client, recording_channel):
    london = zoneinfo.ZoneInfo("Europe/London")
    with time_machine.travel(dt.datetime(2026, 12, 1, 22, 30, tzinfo=london), tick=False):
        device, _ = device_with_cookie(
            client, channel=Channel.CONSOLE, time_zone="Europe/London", **OVERNIGHT
        )
        _, row = due_row(device)
        run_cycle()
        row.refresh_from_db()
        assert row.next_attempt_at == dt.datetime(2026, 12, 2, 7, 0, tzinfo=london)
        page = client.get("/notifications/").content.decode()
    # The person set 22:00–07:00 in London: not 16:00, the site's (Tokyo) time of that end.
    assert "Held until 07:00 (quiet hours)." in page


def test_quiet_hours_are_saved_from_settings(client):
    device, _ = device_with_cookie(client)
    response = client.post(
        "/settings/quiet", {"quiet_start": "22:00", "quiet_end": "07:00", "time_zone": "Asia/Tokyo"}
    )
    assert response.status_code == 302
    device.refresh_from_db()
    assert (device.quiet_start, device.quiet_end) == (dt.time(22, 0), dt.time(7, 0))
    assert "Nothing is sent from 22:00 to 07:00" in client.get("/settings/").content.decode()

    client.post("/settings/quiet", {"quiet_start": "", "quiet_end": "", "time_zone": "Asia/Tokyo"})
    device.refresh_from_db()
    assert device.quiet_start is None and device.quiet_end is None


@pytest.mark.parametrize(
    "data",
    [
        {"quiet_start": "22:00", "quiet_end": "", "time_zone": "Asia/Tokyo"},
        {"quiet_start": "", "quiet_end": "07:00", "time_zone": "Asia/Tokyo"},
        {"quiet_start": "22:00", "quiet_end": "22:00", "time_zone": "Asia/Tokyo"},
        {"quiet_start": "25:00", "quiet_end": "07:00", "time_zone": "Asia/Tokyo"},
        {"quiet_start": "10pm", "quiet_end": "07:00", "time_zone": "Asia/Tokyo"},
        {"quiet_start": "22:00", "quiet_end": "07:00", "time_zone": "Mars/Olympus"},
        {"quiet_start": "22:00", "quiet_end": "07:00", "time_zone": ""},
        {"quiet_start": "22:00", "quiet_end": "07:00", "time_zone": "x" * 500},
        {},
    ],
)
def test_bad_quiet_hours_are_a_400_with_a_message_and_write_nothing(client, data):
    device, _ = device_with_cookie(client)
    response = client.post("/settings/quiet", data)
    assert response.status_code == 400
    assert b'class="errorlist' in response.content
    device.refresh_from_db()
    assert device.quiet_start is None and device.quiet_end is None
    assert device.time_zone == "Asia/Tokyo"


def test_bad_quiet_hours_from_a_new_browser_create_no_device(client):
    assert client.post("/settings/quiet", {"quiet_start": "22:00"}).status_code == 400
    assert Device.objects.count() == 0


def test_staff_find_held_rows_by_the_quiet_hours_reason_filter(admin_client, recording_channel):
    from tests.staff.test_admin_pages import listed

    with time_machine.travel(tokyo(1, 22, 30), tick=False):
        _, held = due_row(DeviceFactory(**OVERNIGHT))
        run_cycle()
        assert listed(admin_client, "?reason__exact=quiet_hours") == [held.pk]
        assert listed(admin_client, "?queue=waiting") == [held.pk]


def test_the_end_of_a_quiet_window_is_never_before_now_on_a_fall_back_night():
    device = Device(
        time_zone="America/New_York", quiet_start=dt.time(22, 0), quiet_end=dt.time(1, 30)
    )
    # 2026-11-01 01:15 EST, the second 01:15 of the night: quiet until the second 01:30.
    now = dt.datetime(2026, 11, 1, 6, 15, tzinfo=dt.UTC)
    assert quiet_until(device, now) == dt.datetime(2026, 11, 1, 6, 30, tzinfo=dt.UTC)
    # The first 01:15 (EDT) ends at the first 01:30, as any other night.
    first = dt.datetime(2026, 11, 1, 5, 15, tzinfo=dt.UTC)
    assert quiet_until(device, first) == dt.datetime(2026, 11, 1, 5, 30, tzinfo=dt.UTC)
