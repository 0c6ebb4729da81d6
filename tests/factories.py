"""factory-boy factories for the domain and the outbox."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Sequence

import factory
from django.utils import timezone

from demo.models import DemoProduct
from outbox.models import DispatchRun, Outbox, OutboxEvent, Status
from watches.devices import cookie_name, hash_token, new_token
from watches.models import Channel, Device, Listing, NotifyVia, Product, Trigger, Watch


class DemoProductFactory(factory.django.DjangoModelFactory[DemoProduct]):
    class Meta:
        model = DemoProduct
        django_get_or_create = ("item_code",)

    item_code = factory.Sequence(lambda n: f"demo-item-{n}")
    name = factory.Sequence(lambda n: f"トイレットペーパー 12ロール No.{n}")
    category = "トイレットペーパー"
    price = 1000
    shipping = 0
    in_stock = True
    units_per_pack = 12
    unit_label = "roll"


class ListingFactory(factory.django.DjangoModelFactory[Listing]):
    """A demo-marketplace listing, with its DemoProduct (the marketplace's side) alongside."""

    class Meta:
        model = Listing
        # The post-generation hook creates the DemoProduct; the listing needs no second save.
        skip_postgeneration_save = True

    source = "demo"
    item_code = factory.Sequence(lambda n: f"demo-listing-{n}")
    name = factory.Sequence(lambda n: f"洗濯洗剤 詰め替え No.{n}")
    shop_name = "Yasugoro Demo Shop"
    category = "洗剤"
    price = 1000
    shipping = 0
    in_stock = True
    units_per_pack = 12
    unit_label = "roll"
    # Observed a minute ago: not due for polling, yet older than the dispatcher's freshness
    # bound (OUTBOX_REFETCH_MAX_AGE, 30 s), so a dispatcher asks the marketplace again.
    last_polled_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=1))

    @factory.post_generation
    def product(self, create, extracted, **kwargs):
        if create and self.source == "demo" and extracted is not False:
            DemoProductFactory(
                item_code=self.item_code,
                name=self.name,
                price=self.price or 1,
                shipping=self.shipping,
                in_stock=bool(self.in_stock),
                units_per_pack=self.units_per_pack,
                **kwargs,
            )


class DeviceFactory(factory.django.DjangoModelFactory[Device]):
    class Meta:
        model = Device

    token_hash = factory.LazyFunction(lambda: secrets.token_hex(32))
    channel = Channel.CONSOLE
    language = "en"


class EmailDeviceFactory(DeviceFactory):
    """A device told by e-mail only, its address confirmed."""

    notify_via = NotifyVia.EMAIL
    email = factory.Sequence(lambda n: f"watcher{n}@mail.example")
    email_confirmed_at = factory.LazyFunction(timezone.now)


class SubscribedDeviceFactory(DeviceFactory):
    channel = Channel.WEBPUSH
    push_endpoint = factory.Sequence(lambda n: f"https://push.example.test/send/{n}")
    push_p256dh = "BOr" + "A" * 84
    push_auth = "A" * 22
    push_active = True


class WatchFactory(factory.django.DjangoModelFactory[Watch]):
    class Meta:
        model = Watch

    device = factory.SubFactory(DeviceFactory)
    listing = factory.SubFactory(ListingFactory)
    trigger = Trigger.TARGET_PRICE
    target_price = 1200


def device_with_cookie(client=None, **fields) -> tuple[Device, str]:
    """A web-push device whose token is known, so a test client can carry its cookie (set on
    `client` when given). Returns the device and its raw token."""
    token = new_token()
    fields.setdefault("channel", Channel.WEBPUSH)
    device = DeviceFactory.create(token_hash=hash_token(token), **fields)
    if client is not None:
        client.cookies[cookie_name()] = token
    return device, token


class OutboxFactory(factory.django.DjangoModelFactory[Outbox]):
    """An outbox row in any state, written directly: for counting and display tests. Tests of
    how rows move build them with `enqueue` and `transition` instead."""

    class Meta:
        model = Outbox

    watch = factory.SubFactory(WatchFactory)
    device = factory.SelfAttribute("watch.device")
    channel = factory.SelfAttribute("device.channel")
    trigger = factory.SelfAttribute("watch.trigger")
    status = Status.PENDING
    detected_at = factory.LazyFunction(timezone.now)
    detected_payload = factory.LazyAttribute(
        lambda row: {"price": 980, "shipping": 0, "in_stock": True, "line": "1200"}
    )
    next_attempt_at = factory.LazyAttribute(lambda row: row.detected_at)
    created_at = factory.LazyAttribute(lambda row: row.detected_at)
    updated_at = factory.LazyAttribute(lambda row: row.created_at)


class OutboxEventFactory(factory.django.DjangoModelFactory[OutboxEvent]):
    class Meta:
        model = OutboxEvent

    outbox = factory.SubFactory(OutboxFactory)
    from_status = Status.SENDING
    to_status = factory.SelfAttribute("outbox.status")
    reason = factory.SelfAttribute("outbox.reason")
    at = factory.SelfAttribute("outbox.updated_at")


class DispatchRunFactory(factory.django.DjangoModelFactory[DispatchRun]):
    class Meta:
        model = DispatchRun

    started_at = factory.LazyFunction(timezone.now)
    finished_at = factory.SelfAttribute("started_at")
    holder = "test-host:1:cafe"


def with_history(listing: Listing, prices: Sequence[int | None], *, now) -> Listing:
    """One price point a day ending the day before `now` (None: out of stock), then the
    listing's typical price and 90-day low recomputed from it, as polling keeps them."""
    from watches.models import PricePoint
    from watches.polling.history import refresh_stats

    start = now - dt.timedelta(days=len(prices))
    PricePoint.objects.bulk_create(
        PricePoint(
            listing=listing,
            observed_at=start + dt.timedelta(days=i),
            price=p or listing.price,
            shipping=0,
            in_stock=p is not None,
        )
        for i, p in enumerate(prices)
    )
    refresh_stats([listing.pk], now)
    listing.refresh_from_db()
    return listing


def ichiba_offers(
    ichiba, jan: str, *, price_now: int, count: int = 3, **fields
) -> tuple[Product, list[Listing]]:
    """A product sold by `count` shops on the fake Ichiba at `price_now` each, and its offers
    as listings we know (`fields` as they were last observed)."""
    product = Product.objects.create(jan=jan, name="Scottie 12 rolls")
    offers: list[Listing] = []
    for n in range(count):
        code = f"shop{n}:scottie-12"
        ichiba.add(code, price=price_now, jan=jan)
        offers.append(
            ListingFactory.create(
                source="rakuten", item_code=code, product_id=product.pk, jan=jan, **fields
            )
        )
    return product, offers
