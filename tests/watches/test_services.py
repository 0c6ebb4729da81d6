"""watches.services: the changes other apps may ask of the domain, each doing what it promises."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
import time_machine

from demo.models import DemoProduct
from tests.factories import ListingFactory, SubscribedDeviceFactory, WatchFactory
from watches import services
from watches.marketplaces.base import FetchError, FetchKind, Observation
from watches.models import Device, Listing, PricePoint

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def test_refetch_answers_by_listing_and_keeps_what_it_learned():
    fresh, sold_out = ListingFactory(price=900), ListingFactory(price=900)
    DemoProduct.objects.filter(item_code=fresh.item_code).update(price=850)
    DemoProduct.objects.filter(item_code=sold_out.item_code).delete()

    answers = services.refetch([fresh, sold_out], NOW)

    assert isinstance(answers[fresh.pk], Observation) and answers[fresh.pk].price == 850
    assert answers[sold_out.pk].kind == FetchKind.NOT_FOUND
    fresh.refresh_from_db()
    sold_out.refresh_from_db()
    assert (fresh.price, fresh.low_90, fresh.last_polled_at) == (850, 850, NOW)
    assert sold_out.last_error.startswith("not_found") and sold_out.last_error_at == NOW
    assert list(PricePoint.objects.values_list("listing_id", "price")) == [(fresh.pk, 850)]


def test_an_adapter_that_crashes_is_an_answer_not_an_exception(settings):
    settings.MARKETPLACE_ADAPTERS = {**settings.MARKETPLACE_ADAPTERS, "demo": "builtins.object"}
    listing = ListingFactory()

    answers = services.refetch([listing], NOW)

    assert isinstance(answers[listing.pk], FetchError)
    assert answers[listing.pk].kind == FetchKind.BAD_RESPONSE
    assert "AttributeError" in Listing.objects.get(pk=listing.pk).last_error


def test_refetch_of_nothing_asks_nothing():
    assert services.refetch([], NOW) == {}


def test_advance_baselines_moves_only_the_watches_given():
    told, other = WatchFactory(), WatchFactory()
    detected = NOW - dt.timedelta(minutes=3)

    assert services.advance_baselines({told.pk: (Decimal("75.00"), detected)}, NOW) == 1

    told.refresh_from_db()
    other.refresh_from_db()
    assert (told.last_notified_price, told.last_notified_at) == (Decimal("75.00"), NOW)
    assert told.last_notified_detected_at == detected
    assert (other.last_notified_price, other.last_notified_at) == (None, None)


def test_advance_baselines_keeps_a_later_detections_baseline_recorded_first():
    watch = WatchFactory()
    later, earlier = NOW - dt.timedelta(hours=1), NOW - dt.timedelta(days=1)
    services.advance_baselines({watch.pk: (Decimal("70.00"), later)}, NOW)

    # An earlier detection's delivery (another channel, another dispatcher) recorded after.
    services.advance_baselines(
        {watch.pk: (Decimal("80.00"), earlier)}, NOW + dt.timedelta(seconds=5)
    )

    watch.refresh_from_db()
    assert (watch.last_notified_price, watch.last_notified_at) == (Decimal("70.00"), NOW)
    assert watch.last_notified_detected_at == later


def test_a_gone_subscription_is_deactivated_by_device_and_endpoint():
    gone = SubscribedDeviceFactory()
    resubscribed = SubscribedDeviceFactory()
    old_endpoint = resubscribed.push_endpoint
    # The browser subscribed anew while a push to its old endpoint was on its way.
    Device.objects.filter(pk=resubscribed.pk).update(push_endpoint=old_endpoint + "-new")

    deactivated = services.deactivate_gone_subscriptions(
        [(gone.pk, gone.push_endpoint), (resubscribed.pk, old_endpoint)]
    )

    assert deactivated == 1
    assert Device.objects.get(pk=gone.pk).push_active is False
    assert Device.objects.get(pk=resubscribed.pk).push_active is True


def test_deactivating_nothing_changes_nothing():
    device = SubscribedDeviceFactory()
    assert services.deactivate_gone_subscriptions([]) == 0
    assert Device.objects.get(pk=device.pk).push_active is True


def test_pause_listings_counts_only_the_newly_paused():
    active, already = ListingFactory(), ListingFactory(paused=True)

    assert services.pause_listings([active.pk, already.pk]) == 1
    assert set(Listing.objects.filter(paused=True).values_list("pk", flat=True)) == {
        active.pk,
        already.pk,
    }


def test_the_outbox_door_lists_exactly_its_functions():
    assert sorted(services.__all__) == [
        "ProductAnswer",
        "advance_baselines",
        "budget_status",
        "deactivate_gone_subscriptions",
        "endpoint_allowed",
        "listings_paused",
        "marketplace_halts",
        "missed_for",
        "pause_listings",
        "recheck_capacity",
        "recheck_units",
        "record_bounces",
        "refetch",
        "refetch_or_reuse",
        "refetch_products",
        "unsubscribe_token",
        "watched_coverage",
    ]
