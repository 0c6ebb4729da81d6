"""The domain: what we watch (listings and their price history), who watches (anonymous
devices) and how (watches with a trigger and its parameters)."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Source(models.TextChoices):
    DEMO = "demo", _("Demo market")
    RAKUTEN = "rakuten", _("Rakuten Ichiba")
    YAHOO = "yahoo", _("Yahoo! Shopping")


class Trigger(models.TextChoices):
    TARGET_PRICE = "target_price", _("At or below my price")
    PRICE_DROP = "price_drop", _("Drops by a percentage")
    LOWEST = "lowest", _("Lowest in 90 days")
    BACK_IN_STOCK = "back_in_stock", _("Back in stock")


class Channel(models.TextChoices):
    """How a device is reached. Each outbox row goes out on its device's channel."""

    WEBPUSH = "webpush", _("Web Push")
    CONSOLE = "console", _("Console (development)")


class Product(models.Model):
    """One product whatever the shop: what a JAN code (the barcode on the pack) names. Its
    listings (`offers`) are the shops' offers of it, on every marketplace."""

    jan = models.CharField(max_length=13, unique=True, help_text=_("JAN code, 8 or 13 digits"))
    name = models.CharField(max_length=500, blank=True)
    units_per_pack = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Rolls, grams, millilitres… per pack, for unit price")
    )
    unit_label = models.CharField(max_length=20, blank=True, help_text=_("e.g. roll, g, ml"))
    image_url = models.URLField(max_length=1000, blank=True)
    # When its offers were last asked for as a whole (one request for every shop's offer),
    # and what went wrong then: the offers' own rows keep their prices.
    last_polled_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # Polling: products least recently asked about first.
            models.Index(fields=["last_polled_at"], name="product_poll_due"),
        ]

    def __str__(self) -> str:
        return self.name or self.jan


class Listing(models.Model):
    """One item on one marketplace, with its price and stock as last seen. When its JAN code
    is known it is one shop's offer of a `Product`."""

    source = models.CharField(max_length=20, choices=Source.choices)
    item_code = models.CharField(max_length=200)
    product = models.ForeignKey(
        Product, null=True, blank=True, on_delete=models.SET_NULL, related_name="offers"
    )
    jan = models.CharField(
        max_length=13, blank=True, help_text=_("JAN code when known: the listing is then an offer")
    )
    name = models.CharField(max_length=500, blank=True)
    shop_name = models.CharField(max_length=200, blank=True)
    category = models.CharField(max_length=100, blank=True)
    url = models.URLField(max_length=1000, blank=True)
    image_url = models.URLField(max_length=1000, blank=True)
    units_per_pack = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Rolls, grams, millilitres… per pack, for unit price")
    )
    unit_label = models.CharField(max_length=20, blank=True, help_text=_("e.g. roll, g, ml"))
    price = models.PositiveIntegerField(null=True, blank=True, help_text=_("Yen, as last seen"))
    shipping = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Yen; 0 is free shipping, empty is unknown")
    )
    in_stock = models.BooleanField(null=True, blank=True)
    # Denormalised from the price history so the home page can sort "cheap right now" without
    # reading history: kept by every observation (watches.observations, for polls and
    # re-fetches alike), recomputed in bulk by watches.history.refresh_stats.
    typical_price = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Median effective price, last 30 days")
    )
    low_90 = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Lowest effective price, last 90 days")
    )
    paused = models.BooleanField(default=False, help_text=_("Staff stopped tracking it"))
    last_polled_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What search looks in (watches.search_text.for_listing): the folded name, its readings,
    # the category's words in both languages. Kept current by save(); indexed for substring
    # search by watches.search_index (FTS5 trigram / pg_trgm).
    search_text = models.TextField(blank=True, default="", editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "item_code"], name="listing_source_code"),
        ]
        indexes = [
            # Polling: active listings, least recently polled first.
            models.Index(
                fields=["last_polled_at"], name="listing_poll_due", condition=Q(paused=False)
            ),
            # Home page: all listings in name order (ORDER BY name, id), a page at a time.
            models.Index(fields=["name", "id"], name="listing_browse", condition=Q(paused=False)),
            # Home page: one category in name order.
            models.Index(
                fields=["category", "name", "id"],
                name="listing_category_browse",
                condition=Q(paused=False),
            ),
        ]

    def __str__(self) -> str:
        return self.name or f"{self.source}:{self.item_code}"

    def save(self, *args, **kwargs) -> None:
        from watches.search_text import for_listing

        self.search_text = for_listing(self.name, self.category)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and {"name", "category"} & set(update_fields):
            kwargs["update_fields"] = {*update_fields, "search_text"}
        super().save(*args, **kwargs)
        # A listing saved one by one (staff, add by link, the demo seed) shows at once.
        from watches.pagecache import prices_changed

        prices_changed()

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    @property
    def unit_price(self) -> Decimal | None:
        return unit_price(self.effective_price, self.units_per_pack)

    @property
    def unit_low_90(self) -> Decimal | None:
        """The 90-day low per unit, to compare with a per-unit target."""
        return unit_price(self.low_90, self.units_per_pack)

    @property
    def change_vs_typical(self) -> float | None:
        """Percent of the current effective price above (+) or below (−) the typical price."""
        current = self.effective_price
        if current is None or not self.typical_price:
            return None
        return round((current - self.typical_price) * 100 / self.typical_price, 1)


def effective_price(price: int | None, shipping: int | None) -> int | None:
    """Price plus shipping where shipping is known: what the shopper really pays."""
    if price is None:
        return None
    return price + (shipping or 0)


def unit_price(price: int | None, units_per_pack: int | None) -> Decimal | None:
    """Price per unit, rounded *up* to the sen: a ¥50/unit target must not be met by ¥50.004,
    and the same price always gives the same value (it is stored as a delivered baseline)."""
    if price is None or not units_per_pack:
        return None
    return (Decimal(price) / Decimal(units_per_pack)).quantize(
        Decimal("0.01"), rounding=ROUND_CEILING
    )


class PricePoint(models.Model):
    """One observation of a listing: the history that charts and triggers read."""

    listing = models.ForeignKey(Listing, on_delete=models.CASCADE, related_name="price_points")
    observed_at = models.DateTimeField()
    price = models.PositiveIntegerField(null=True, blank=True)
    shipping = models.PositiveIntegerField(null=True, blank=True)
    in_stock = models.BooleanField()

    class Meta:
        indexes = [
            # History of one listing over a window (charts, typical price, 90-day low).
            models.Index(fields=["listing", "observed_at"], name="pricepoint_listing_time"),
        ]

    def __str__(self) -> str:
        return f"{self.listing_id} {self.observed_at:%Y-%m-%d %H:%M} {self.price}"

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    @classmethod
    def from_observation(cls, listing: Listing, observation) -> PricePoint:
        """The history row of a marketplace observation (watches.marketplaces.base)."""
        return cls(
            listing=listing,
            observed_at=observation.observed_at,
            price=observation.price,
            shipping=observation.shipping,
            in_stock=observation.in_stock,
        )


class Device(models.Model):
    """An anonymous person: their browser is their identity. Only a hash of the token that
    their cookie carries is stored."""

    token_hash = models.CharField(max_length=64, unique=True)
    channel = models.CharField(max_length=20, choices=Channel.choices, default=Channel.WEBPUSH)
    language = models.CharField(max_length=10, default="ja")
    push_endpoint = models.URLField(max_length=1000, blank=True)
    push_p256dh = models.CharField(max_length=100, blank=True)
    push_auth = models.CharField(max_length=50, blank=True)
    push_active = models.BooleanField(default=False)
    push_subscribed_at = models.DateTimeField(null=True, blank=True)
    # A pending "move to another browser" link: only the hash of its token, and when it stops
    # working. Null when there is none; redeeming it clears both (single use).
    transfer_token_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    transfer_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One push subscription belongs to one device: the same endpoint sent again (or
            # from another device in the same browser) moves, it is never stored twice.
            models.UniqueConstraint(
                fields=["push_endpoint"],
                name="device_one_per_push_endpoint",
                condition=~Q(push_endpoint=""),
            ),
        ]

    def __str__(self) -> str:
        return f"device {self.short_id}"

    @property
    def short_id(self) -> str:
        return self.token_hash[:8]

    @property
    def can_receive(self) -> bool:
        """Whether the device's channel can reach it at all right now."""
        if self.channel == Channel.WEBPUSH:
            return self.push_active and bool(self.push_endpoint)
        return True


class LiveWatchManager(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(removed_at__isnull=True)


class Watch(models.Model):
    """One device watching one listing with one trigger — or, with `product`, every shop's
    offer of a product ("any shop at or below ¥X"). A product watch's `listing` is the offer
    it follows now: the cheapest when it was made, then the one each detection fired on, so
    the dispatcher's re-fetch and message name that shop."""

    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="watches")
    listing = models.ForeignKey(Listing, on_delete=models.CASCADE, related_name="watches")
    # Indexed (the foreign key's own index): product polling reads a product's watches.
    product = models.ForeignKey(
        Product, null=True, blank=True, on_delete=models.CASCADE, related_name="watches"
    )
    trigger = models.CharField(max_length=20, choices=Trigger.choices)
    target_price = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Yen (per unit when comparing unit prices)")
    )
    drop_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    use_unit_price = models.BooleanField(default=False)
    paused = models.BooleanField(default=False)
    removed_at = models.DateTimeField(null=True, blank=True)
    # The baseline last delivered (the compared value: effective or unit price), moved only
    # when a notification is really sent.
    last_notified_price = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True
    )
    last_notified_at = models.DateTimeField(null=True, blank=True)
    # The latest detection this watch could not be told about because its device could not
    # be reached (notifications off): the effective price then, and when it was first seen
    # at that price. Shown on the history page as "we would have told you". Written by
    # polling through watches.missed, never by the outbox.
    missed_price = models.PositiveIntegerField(null=True, blank=True)
    missed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = models.Manager()
    live = LiveWatchManager()

    class Meta:
        verbose_name_plural = "watches"
        indexes = [
            # Polling: the live watches of one listing.
            models.Index(
                fields=["listing"], name="watch_live_by_listing", condition=Q(removed_at=None)
            ),
            # Pages: one device's watches.
            models.Index(fields=["device", "created_at"], name="watch_by_device"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(drop_percent__isnull=True)
                | Q(drop_percent__gte=1, drop_percent__lte=90),
                name="watch_drop_percent_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_trigger_display()} on {self.product or self.listing}"

    @property
    def is_live(self) -> bool:
        return self.removed_at is None and not self.paused
