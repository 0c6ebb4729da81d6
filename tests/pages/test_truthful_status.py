"""What the pages promise matches what will happen: with notifications off nothing promises a
notification, and a trigger that fires leaves "we would have told you" on /notifications/;
a watch already told at this price says so; held-back entries show both prices."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.core.management import call_command

from demo.market import set_product
from outbox.models import Outbox, Reason, Status
from tests.factories import ListingFactory, OutboxFactory, WatchFactory, device_with_cookie
from tests.outbox_helpers import enqueue_for
from watches.models import Channel, Listing, Product, Watch
from watches.polling.poll import poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 12, 1, 10, 0, tzinfo=TOKYO)
EXPECT = "expect a notification after the next price check"
NEXT_CHECK = "we tell you after the next check"


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


@pytest.fixture
def listing(clock):
    return ListingFactory(name="スコッティ 12ロール", price=520, units_per_pack=None, unit_label="")


def push_on(client):
    device, _ = device_with_cookie(
        client, push_endpoint="https://fcm.googleapis.com/fcm/send/x", push_active=True
    )
    return device


def push_off(client):
    device, _ = device_with_cookie(client)
    return device


def test_with_notifications_off_the_listing_page_promises_nothing(client, listing):
    WatchFactory(device=push_off(client), listing=listing, target_price=600)
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert EXPECT not in body
    assert "It is already ¥520, at or below your price, but nothing can reach you yet" in body
    assert "Push notifications are off for this browser." in body


def test_with_notifications_on_the_listing_page_expects_a_notification(client, listing):
    WatchFactory(device=push_on(client), listing=listing, target_price=600)
    assert EXPECT in client.get(f"/listings/{listing.pk}/").content.decode()


def test_a_watch_already_told_at_this_price_says_so_instead_of_promising(client, listing):
    told_at = T0 - dt.timedelta(hours=3)
    WatchFactory(
        device=push_on(client),
        listing=listing,
        target_price=600,
        last_notified_price=520,
        last_notified_at=told_at,
    )
    listing_page = client.get(f"/listings/{listing.pk}/").content.decode()
    assert EXPECT not in listing_page
    assert "We told you ¥520 on Dec 1, 07:00; we tell you again if it drops further." in (
        listing_page
    )
    watches_page = client.get("/watches/").content.decode()
    assert NEXT_CHECK not in watches_page
    assert "We told you on Dec 1, 07:00; we tell you again if it goes lower." in watches_page


def test_a_lower_price_than_told_is_news_again(client, listing):
    WatchFactory(
        device=push_on(client),
        listing=listing,
        target_price=600,
        last_notified_price=560,
        last_notified_at=T0 - dt.timedelta(days=1),
    )
    assert EXPECT in client.get(f"/listings/{listing.pk}/").content.decode()
    assert NEXT_CHECK in client.get("/watches/").content.decode()


def test_with_notifications_off_my_watches_says_it_cannot_tell(client, listing):
    WatchFactory(device=push_off(client), listing=listing, target_price=600)
    body = client.get("/watches/").content.decode()
    assert NEXT_CHECK not in body
    assert "At or below your line now, but nothing can reach you yet" in body


# --- "We would have told you" -------------------------------------------------------------


def test_a_trigger_for_a_device_that_cannot_be_reached_is_kept_on_the_watch(clock):
    listing = ListingFactory(price=700, last_polled_at=None)
    off = WatchFactory(device=device_with_cookie()[0], listing=listing, target_price=600)
    set_product(listing.item_code, price=520)
    result = poll()
    assert (result.observations, result.enqueued) == (1, 0)
    assert Outbox.objects.count() == 0, "no row the dispatcher could only drop"
    off.refresh_from_db()
    assert (off.missed_price, off.missed_at) == (520, T0)

    # The same price at the next poll: the first time it was seen stays.
    clock.move_to(T0 + dt.timedelta(minutes=15), tick=False)
    poll(force=True)
    off.refresh_from_db()
    assert (off.missed_price, off.missed_at) == (520, T0)

    # Lower still: the newest miss is kept.
    clock.move_to(T0 + dt.timedelta(minutes=30), tick=False)
    set_product(listing.item_code, price=500)
    poll(force=True)
    off.refresh_from_db()
    assert (off.missed_price, off.missed_at) == (500, T0 + dt.timedelta(minutes=30))


def test_a_reachable_device_still_gets_its_row_and_no_missed_mark(clock):
    listing = ListingFactory(price=520, last_polled_at=None)
    on = WatchFactory(listing=listing, target_price=600)  # console channel: reachable
    assert poll().enqueued == 1
    on.refresh_from_db()
    assert on.missed_price is None and on.missed_at is None


def test_the_history_page_shows_what_we_would_have_told(client, clock):
    listing = ListingFactory(name="スコッティ 12ロール", price=700, last_polled_at=None)
    WatchFactory(device=push_off(client), listing=listing, target_price=600)
    set_product(listing.item_code, price=520)
    poll()
    body = client.get("/notifications/").content.decode()
    assert "We would have told you: ¥520 on 12/1." in body
    assert "Nothing can reach you right now: push notifications are off for this browser" in body
    assert "Neither push nor e-mail can reach you now." in body
    assert 'href="/watches/">Turn push notifications on</a>' in body
    assert "スコッティ 12ロール" in body
    assert "Nothing yet." not in body


def test_a_miss_made_old_news_by_a_later_notification_is_not_shown(client, clock):
    WatchFactory(
        device=push_on(client),
        target_price=600,
        missed_price=520,
        missed_at=T0 - dt.timedelta(days=2),
        last_notified_price=510,
        last_notified_at=T0 - dt.timedelta(days=1),
    )
    assert "We would have told you" not in client.get("/notifications/").content.decode()


def test_a_miss_at_the_price_of_one_a_notification_made_old_news_is_shown_again(clock):
    """Missed ¥520, told ¥520 the next day, back above the line, then ¥520 again while
    notifications are off: a new crossing nobody was told of, at the old miss's price."""
    from watches.missed import missed_for

    day = dt.timedelta(days=1)
    listing = ListingFactory(price=700, last_polled_at=None)
    device = device_with_cookie()[0]
    watch = WatchFactory(device=device, listing=listing, target_price=600)
    set_product(listing.item_code, price=520)
    poll(force=True)
    Watch.objects.filter(pk=watch.pk).update(
        last_notified_price=520, last_notified_at=T0 + day, last_notified_detected_at=T0 + day
    )
    clock.move_to(T0 + 2 * day, tick=False)
    set_product(listing.item_code, price=700)
    poll(force=True)
    clock.move_to(T0 + 3 * day, tick=False)
    set_product(listing.item_code, price=520)
    poll(force=True)

    assert [(m.price, m.at) for m in missed_for(device)] == [(520, T0 + 3 * day)]


def test_once_something_reaches_the_device_a_miss_says_nothing_did_then(client, clock):
    WatchFactory(device=push_on(client), target_price=600, missed_price=520, missed_at=T0)
    body = client.get("/notifications/").content.decode()
    assert "We would have told you: ¥520 on 12/1." in body
    assert "Neither push nor e-mail could reach you then." in body


# --- Held back, with both prices ------------------------------------------------------------


def test_a_held_back_entry_shows_the_detected_and_the_rechecked_price(client, clock):
    device, _ = device_with_cookie(client, channel=Channel.CONSOLE)
    listing = ListingFactory(price=520)
    watch = WatchFactory(device=device, listing=listing, target_price=600)
    enqueue_for(watch, price=520, line="600")
    set_product(listing.item_code, price=640)  # back up before the dispatcher checks
    call_command("dispatch_outbox")
    row = Outbox.objects.get()
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    body = client.get("/notifications/").content.decode()
    assert "The price went back up before we could tell you." in body
    assert "Seen at ¥520; ¥640 when we checked again." in body


def test_held_back_before_any_recheck_shows_the_detected_price_alone(client, clock):
    device = push_off(client)
    watch = WatchFactory(device=device, listing=ListingFactory(price=520), target_price=600)
    enqueue_for(watch, price=520, line="600")
    call_command("dispatch_outbox")
    assert Outbox.objects.get().reason == Reason.NO_SUBSCRIPTION
    body = client.get("/notifications/").content.decode()
    assert "Seen at ¥520." in body and "when we checked again" not in body
    assert Watch.objects.get().missed_price is None


# --- Which channel reaches the person ------------------------------------------------------


def email_confirmed(client, notify_via: str = "both"):
    device = push_off(client)
    device.email, device.email_confirmed_at, device.notify_via = "me@mail.example", T0, notify_via
    device.save()
    return device


def test_push_off_with_a_confirmed_address_says_email_reaches_not_that_nothing_does(
    client, listing
):
    device = email_confirmed(client)
    watch = WatchFactory(device=device, listing=listing, target_price=600)
    OutboxFactory(
        watch=watch,
        channel=Channel.EMAIL,
        status=Status.SENT,
        sent_at=T0,
        sent_message={"title": "x", "body": "¥520", "price": 520},
    )
    body = client.get("/notifications/").content.decode()
    assert "We tell you by e-mail at me@mail.example." in body
    assert "Push notifications are off for this browser." in body
    assert "Nothing can reach you" not in body
    assert '<span class="via">by e-mail</span>' in body

    # Every form of the settings page comes back to the same truth.
    settings_page = client.post("/settings/channels", {"notify_via": "both"}, follow=True)
    text = settings_page.content.decode()
    assert "E-mail reaches you at me@mail.example." in text
    assert 'data-reach="none" hidden' in text
    assert "Notifications are off" not in text


def test_each_history_entry_says_by_which_channel_it_went(client, listing):
    device = email_confirmed(client)
    watch = WatchFactory(device=device, listing=listing, target_price=600)
    for channel in (Channel.EMAIL, Channel.WEBPUSH):
        OutboxFactory(watch=watch, channel=channel, status=Status.SENT, sent_at=T0)
    body = client.get("/notifications/").content.decode()
    assert body.count('<span class="via">by e-mail</span>') == 1
    assert body.count('<span class="via">by push notification</span>') == 1


def test_an_offers_page_names_a_product_watch_as_the_products(client, listing):
    product = Product.objects.create(jan="4901750404406", name="スコッティ")
    Listing.objects.filter(pk=listing.pk).update(product=product, jan=product.jan)
    WatchFactory(device=push_on(client), listing=listing, product=product, target_price=370)
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "You watch this product at every shop" in body
    assert "Any shop at or below ¥370" in body
    assert "You are watching this" not in body


# --- A watch saved while its condition already holds ---------------------------------------


def save_watch(client, listing, target: str) -> str:
    response = client.post(
        f"/listings/{listing.pk}/", {"trigger": "target_price", "target_price": target}, follow=True
    )
    return " ".join(str(m) for m in response.context["messages"])


def test_saved_during_quiet_hours_it_says_until_when_it_is_held(client, listing, clock):
    clock.move_to(dt.datetime(2026, 12, 1, 23, 30, tzinfo=TOKYO), tick=False)
    push_on(client).__class__.objects.update(quiet_start=dt.time(22), quiet_end=dt.time(8))
    said = save_watch(client, listing, "600")
    assert said == (
        "Watching. We check the price again before we tell you. The price is already ¥520, "
        "at or below ¥600. Your quiet hours hold notifications until 08:00: we check the price "
        "again then, and tell you if it still holds."
    )
    assert "until 08:00" in client.get("/watches/").content.decode()


def test_saved_again_after_being_told_at_this_price_it_says_so(client, listing):
    watch = WatchFactory(
        device=push_on(client),
        listing=listing,
        target_price=550,
        last_notified_price=520,
        last_notified_at=T0 - dt.timedelta(hours=1),
    )
    said = save_watch(client, listing, "600")
    assert said.startswith("Your watch on this item is updated. The price is already ¥520")
    assert "We told you ¥520 on Dec 1, 09:00: we tell you again if it goes lower." in said
    watch.refresh_from_db()
    assert watch.target_price == 600


def test_saved_above_the_price_nothing_more_is_said(client, listing):
    push_on(client)
    assert save_watch(client, listing, "500") == (
        "Watching. We check the price again before we tell you."
    )


def test_saving_the_form_over_a_paused_watch_says_it_is_paused(client, listing):
    """Saving changes a paused watch and leaves it paused: "we tell you after its next price
    check" would promise what a paused watch never sends."""
    watch = WatchFactory(device=push_on(client), listing=listing, target_price=500, paused=True)
    said = save_watch(client, listing, "600")
    watch.refresh_from_db()
    assert (watch.target_price, watch.paused) == (600, True)
    assert said == (
        "Your watch on this item is updated. It is paused: nothing is sent for it until you "
        "resume it in My watches."
    )


# --- Paused: by the person, or the listing by staff -------------------------------------------


def test_the_listing_page_promises_no_notification_for_a_watch_the_person_paused(client, listing):
    watch = WatchFactory(device=push_on(client), listing=listing, target_price=600)
    client.post(f"/watches/{watch.pk}/pause", {"paused": "1"})
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "Paused" in body
    assert EXPECT not in body


def test_my_watches_promises_no_notification_on_a_listing_staff_stopped_tracking(client, listing):
    """Polling skips a paused listing: nothing comes, whatever the price says."""
    WatchFactory(device=push_on(client), listing=listing, target_price=600)
    Listing.objects.filter(pk=listing.pk).update(paused=True)
    watches_page = client.get("/watches/").content.decode()
    listing_page = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "No longer tracked" in watches_page
    assert "We no longer track this item: nothing is sent for it." in watches_page
    assert NEXT_CHECK not in watches_page
    assert EXPECT not in listing_page


def test_a_product_watch_following_an_offer_staff_stopped_tracking_is_not_said_untracked(
    client, listing
):
    """A product watch goes on with the product's other offers (the re-check drops only a
    listing watch of a paused listing)."""
    product = Product.objects.create(jan="4901750404406", name="スコッティ")
    Listing.objects.filter(pk=listing.pk).update(product=product, jan=product.jan, paused=True)
    WatchFactory(device=push_on(client), listing=listing, product=product, target_price=370)
    assert "No longer tracked" not in client.get("/watches/").content.decode()


# --- When the price was checked -----------------------------------------------------------


def test_a_failed_check_is_not_shown_as_the_time_the_price_was_last_checked(client, ichiba, clock):
    """A failed ask moves `last_polled_at` too (its turn in the queue): the page says the
    check failed and that the price is an earlier check's, never "Price last checked <then>"
    over a price three days old."""
    ichiba.add("yasu-shop:tp-12r", itemName="楽天のトイレットペーパー", price=1000)
    client.post("/add/", {"link": "https://item.rakuten.co.jp/yasu-shop/tp-12r/"})
    listing = Listing.objects.get(source="rakuten")
    assert listing.last_polled_at == T0

    clock.move_to(T0 + dt.timedelta(days=3), tick=False)
    ichiba.set("yasu-shop:tp-12r", price=1500)
    ichiba.behave["yasu-shop:tp-12r"] = "server"
    poll(codes=["yasu-shop:tp-12r"])
    listing.refresh_from_db()
    assert listing.price == 1000 and listing.last_error  # the check failed: the price is old

    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "¥1,000" in body
    assert "Price last checked" not in body
    assert (
        "The last price check, Dec 4, 10:00, failed. The price shown is from an earlier check, "
        "made Dec 1, 10:00 or later."
    ) in body


def test_editing_a_watch_on_a_listing_staff_stopped_tracking_promises_no_notification(
    client, clock
):
    """Nothing is sent for a watch on a listing staff stopped tracking: saving its edit form
    says so, and promises nothing."""
    listing = ListingFactory(price=520, units_per_pack=None, unit_label="")
    watch = WatchFactory(device=push_on(client), listing=listing, target_price=500)
    Listing.objects.filter(pk=listing.pk).update(paused=True)

    response = client.post(
        f"/watches/{watch.pk}/edit/",
        {"trigger": "target_price", "target_price": "600"},
        follow=True,
    )
    said = " ".join(str(m) for m in response.context["messages"])
    assert "updated" in said  # the edit was taken
    assert "we tell you after its next price check" not in said
    assert "We no longer track this item: nothing is sent for it." in said


def test_listing_page_says_shipping_unknown_without_points(client):
    """A price whose shipping the shop did not name is never shown as all-in, with points or
    without."""
    listing = ListingFactory(source="rakuten", price=1000, shipping=None, points=0)
    page = client.get(f"/listings/{listing.pk}/").content.decode()
    facts = page[page.index('<dl class="facts">') :]
    assert "¥1,000" in facts
    assert "shipping unknown" in facts[: facts.index("</div>")]
