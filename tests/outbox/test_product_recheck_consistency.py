"""A product watch is judged alike at detection and at the dispatcher's re-check: the best
offer for a premium member counts the member-only points, every offer is judged and told per
the product's pack, and pausing the offer the watch last pointed to leaves the product's
other shops to judge."""

from __future__ import annotations

from decimal import Decimal

import pytest

from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory
from tests.outbox.test_product_dispatch import dispatch_at, offer
from tests.watches.test_products import JAN, poll_at, watch
from watches.products.intake import add_product
from watches.products.watches import describe_product
from watches.services import pause_listings

pytestmark = pytest.mark.django_db


# Member-only points and the choice of the best offer.


def member_watch(product):
    """A LYP premium member's product watch after points: "any shop at or below ¥450"."""
    return watch(
        product, device=DeviceFactory(lyp_premium=True), target_price=450, after_points=True
    )


def test_detection_finds_the_shop_cheapest_only_after_member_points(product, yahoo):
    made = member_watch(product)
    # store1: ¥620, no points for everyone, 220 pt for premium members: ¥400 for this
    # member, the only shop at or below ¥450 for them (everyone's cheapest: store4 ¥500).
    yahoo.points("store1_tp-12r", amount=0, lyLimitedPremiumBonusAmount=220)

    assert poll_at(20).enqueued == 1, "store1 is ¥400 for a member: at or below ¥450"
    payload = Outbox.objects.get(watch=made).detected_payload
    assert (payload["item_code"], payload["value"]) == ("store1_tp-12r", "400")


def test_recheck_takes_the_shop_cheapest_only_after_member_points(
    product, yahoo, recording_channel
):
    made = member_watch(product)
    yahoo.set("store3_tp-12r", price=450)  # ¥450 − 4 pt = ¥446 for everyone
    assert poll_at(20).enqueued == 1
    # Before the send store3 goes back up; store1 is now ¥620 − 220 pt = ¥400 for a member.
    yahoo.set("store3_tp-12r", price=600)
    yahoo.points("store1_tp-12r", amount=0, lyLimitedPremiumBonusAmount=220)

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED), (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert message.price == 400
    assert "At ストア store1: ¥620 − 220 pt (LYP premium) = ¥400" in message.body


# Pack size: the product's, not an offer's own.


def test_an_offer_that_joined_without_a_pack_size_is_rechecked_per_unit(
    product, yahoo, recording_channel
):
    describe_product(product, units_per_pack=12, unit_label="roll")
    # A sixth shop, already tracked by its link (no pack size said), joins the product when
    # the poll finds it among the offers (`offer_listing`), at ¥450 = ¥37.50 a roll.
    yahoo.add("store6_tp-12r", jan=JAN, price=450, name="スコッティ 12ロール (store 6)")
    ListingFactory(
        source="yahoo", item_code="store6_tp-12r", jan=JAN, price=450, units_per_pack=None
    )
    made = watch(product, target_price=40, use_unit_price=True)  # ¥40 a roll

    assert poll_at(20).enqueued == 1
    assert offer("store6_tp-12r").product_id == product.pk
    assert Outbox.objects.get(watch=made).detected_payload["value"] == "37.50"

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED), (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert "Now ¥37.50 per roll (¥450 a pack)" in message.body


def test_an_adopted_offer_with_its_own_pack_size_is_told_per_the_products_pack(
    product, yahoo, recording_channel
):
    describe_product(product, units_per_pack=12, unit_label="roll")
    watch_ = watch(product, target_price=40, use_unit_price=True)
    yahoo.set("store3_tp-12r", price=480)  # ¥40.00 a roll
    assert poll_at(20).enqueued == 1
    # A listing tracked by its link with a pack size of its own (24) joins the product
    # through `adopt_listings`, and is the cheapest pack before the send: ¥500 = ¥41.67 a
    # roll of this product's 12-roll pack — above ¥40.
    yahoo.add("store6_tp-12r", jan=JAN, price=500, name="スコッティ 12ロール (store 6)")
    ListingFactory(source="yahoo", item_code="store6_tp-12r", jan=JAN, price=500, units_per_pack=24)
    add_product(JAN)  # a known product: its listings by JAN are adopted
    assert offer("store6_tp-12r").product_id == product.pk
    yahoo.set("store3_tp-12r", price=600)

    dispatch_at(21)

    row = Outbox.objects.get(watch=watch_)
    assert (row.status, row.reason) == (Status.DROPPED, Reason.CONDITION_LOST)
    assert Decimal(row.events.get(to_status=Status.DROPPED).data["value"]) == Decimal("41.67")
    assert recording_channel.delivered == []


# The paused offer a product watch points to.


def test_a_paused_offer_the_product_watch_points_to_does_not_drop_the_row(
    product, yahoo, recording_channel
):
    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    yahoo.set("store4_tp-12r", price=495)
    assert poll_at(20).enqueued == 1
    made.refresh_from_db()
    assert made.listing.item_code == "store3_tp-12r", "the watch follows the best offer"
    # Staff stop tracking store3 before the send; store4 still meets the line at ¥495.
    pause_listings([offer("store3_tp-12r").pk])

    dispatch_at(21)

    row = Outbox.objects.get(watch=made)
    assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED), (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert message.price == 495 and "ストア store4" in message.body


def test_staff_pausing_the_offer_a_product_watch_points_to_leaves_its_row(
    product, yahoo, recording_channel
):
    """The admin's pause (`watches.pausing.pause_listings`) drops rows at once through
    `outbox.reporting.levers.drop_for_paused_listings`, by `watch__listing_id`."""
    from watches.pausing import pause_listings as staff_pause

    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    yahoo.set("store4_tp-12r", price=495)
    assert poll_at(20).enqueued == 1
    staff_pause([offer("store3_tp-12r").pk], actor="staff")

    row = Outbox.objects.get(watch=made)
    assert row.status == Status.PENDING, (row.reason, row.detail)
    dispatch_at(21)

    row.refresh_from_db()
    assert (row.status, row.reason) == (Status.SENT, Reason.DELIVERED), (row.reason, row.detail)
    [(_, message)] = recording_channel.delivered
    assert message.price == 495 and "ストア store4" in message.body
