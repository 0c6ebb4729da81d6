"""The domain: what we watch (listings and their price history), who watches (anonymous
devices) and how (watches with a trigger and its parameters)."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from decimal import ROUND_CEILING, Decimal

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from common import deadlines


class Source(models.TextChoices):
    DEMO = "demo", _("Demo market")
    RAKUTEN = "rakuten", _("Rakuten Ichiba")
    YAHOO = "yahoo", _("Yahoo! Shopping")


# The marketplaces whose answers carry points (watches.points): a new watch on one of their
# listings judges after points by default.
POINT_SOURCES = frozenset({Source.DEMO, Source.RAKUTEN, Source.YAHOO})


class Trigger(models.TextChoices):
    TARGET_PRICE = "target_price", _("At or below my price")
    PRICE_DROP = "price_drop", _("Drops by a percentage")
    LOWEST = "lowest", _("Lowest in 90 days")
    BACK_IN_STOCK = "back_in_stock", _("Back in stock")


class Channel(models.TextChoices):
    """How a device is reached. Each outbox row goes out on its device's channel."""

    WEBPUSH = "webpush", _("Web Push")
    CONSOLE = "console", _("Console (development)")
    EMAIL = "email", _("E-mail")


class NotifyVia(models.TextChoices):
    """Which of its channels a device is told on: its push channel (`Device.channel`), its
    confirmed e-mail address, or both. Each channel gets its own outbox row."""

    PUSH = "push", _("Push notifications")
    EMAIL = "email", _("E-mail")
    BOTH = "both", _("Both")


class Product(models.Model):
    """One product whatever the shop: what a JAN code (the barcode on the pack) names. Its
    listings (`offers`) are the shops' offers of it, on every marketplace."""

    jan = models.CharField(
        verbose_name=_("JAN code"),
        max_length=13,
        unique=True,
        help_text=_("JAN code, 8 or 13 digits"),
    )
    name = models.CharField(verbose_name=_("name"), max_length=500, blank=True)
    units_per_pack = models.PositiveIntegerField(
        verbose_name=_("units per pack"),
        null=True,
        blank=True,
        help_text=_("Rolls, grams, millilitres… per pack, for unit price"),
    )
    unit_label = models.CharField(
        verbose_name=_("unit"), max_length=20, blank=True, help_text=_("e.g. roll, g, ml")
    )
    image_url = models.URLField(verbose_name=_("image URL"), max_length=1000, blank=True)
    # When its offers were last asked for as a whole (one request for every shop's offer),
    # and what went wrong then: the offers' own rows keep their prices.
    last_polled_at = models.DateTimeField(verbose_name=_("last polled at"), null=True, blank=True)
    last_error = models.CharField(verbose_name=_("last error"), max_length=200, blank=True)
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("product")
        verbose_name_plural = _("products")
        indexes = [
            # Polling: products least recently asked about first.
            models.Index(fields=["last_polled_at"], name="product_poll_due"),
        ]

    def __str__(self) -> str:
        return self.name or self.jan

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        # Its page shows the row: stale at once (a product saved by staff, intake, its pack).
        from watches.pages.pagecache import products_changed

        products_changed([self.pk])


class OfferPage(models.Model):
    """When one marketplace's page of a product's offers was last read whole — by a poll, or
    by the dispatcher's re-check of its product watches (`watches.products.polling`): every
    offer it showed was observed then, and any it showed that we did not know became a
    listing. The offers' own state alone cannot say so: a shop's feed or an item request
    may have observed each known offer since, never the shop that started selling it. A
    re-check takes the stored offers as its answer only within its bound of this read
    (`watches.products.refetch`)."""

    product = models.ForeignKey(
        Product,
        verbose_name=_("product"),
        on_delete=models.CASCADE,
        related_name="pages",
        # The (product, source) constraint's index leads with it.
        db_index=False,
    )
    source = models.CharField(verbose_name=_("marketplace"), max_length=20, choices=Source.choices)
    read_at = models.DateTimeField(verbose_name=_("read at"))

    class Meta:
        verbose_name = _("page of offers")
        verbose_name_plural = _("pages of offers")
        constraints = [
            models.UniqueConstraint(fields=["product", "source"], name="offerpage_product_source"),
        ]

    def __str__(self) -> str:
        return f"{self.source}:{self.product_id}"


class Listing(models.Model):
    """One item on one marketplace, with its price and stock as last seen. When its JAN code
    is known it is one shop's offer of a `Product`."""

    source = models.CharField(verbose_name=_("marketplace"), max_length=20, choices=Source.choices)
    item_code = models.CharField(verbose_name=_("item code"), max_length=200)
    product = models.ForeignKey(
        Product,
        verbose_name=_("product"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="offers",
    )
    jan = models.CharField(
        verbose_name=_("JAN code"),
        max_length=13,
        blank=True,
        help_text=_("JAN code when known: the listing is then an offer"),
    )
    name = models.CharField(verbose_name=_("name"), max_length=500, blank=True)
    shop_name = models.CharField(verbose_name=_("shop"), max_length=200, blank=True)
    category = models.CharField(verbose_name=_("category"), max_length=100, blank=True)
    url = models.URLField(verbose_name=_("URL"), max_length=1000, blank=True)
    image_url = models.URLField(verbose_name=_("image URL"), max_length=1000, blank=True)
    units_per_pack = models.PositiveIntegerField(
        verbose_name=_("units per pack"),
        null=True,
        blank=True,
        help_text=_("Rolls, grams, millilitres… per pack, for unit price"),
    )
    unit_label = models.CharField(
        verbose_name=_("unit"), max_length=20, blank=True, help_text=_("e.g. roll, g, ml")
    )
    price = models.PositiveIntegerField(
        verbose_name=_("price"), null=True, blank=True, help_text=_("Yen, as last seen")
    )
    shipping = models.PositiveIntegerField(
        verbose_name=_("shipping"),
        null=True,
        blank=True,
        help_text=_("Yen; 0 is free shipping, empty is unknown"),
    )
    in_stock = models.BooleanField(verbose_name=_("in stock"), null=True, blank=True)
    # The points as last seen (1 pt = ¥1; watches.points): what everyone gets, and until
    # when — a campaign's end, after which `points_after` is what is left —, its multiplier
    # for words ("5倍"), and what only some members get on top (shown, counted only for a
    # device that says it is one).
    points = models.PositiveIntegerField(
        verbose_name=_("points"), default=0, help_text=_("What everyone gets now, 1 pt = ¥1")
    )
    points_until = models.DateTimeField(
        verbose_name=_("points until"), null=True, blank=True, help_text=_("The campaign's end")
    )
    points_after = models.PositiveIntegerField(
        verbose_name=_("points after the campaign"), null=True, blank=True
    )
    point_rate = models.PositiveSmallIntegerField(
        verbose_name=_("point multiplier"), null=True, blank=True
    )
    member_points = models.PositiveIntegerField(
        verbose_name=_("member-only points"),
        default=0,
        help_text=_("On top, for premium members only (LYP premium)"),
    )
    # Denormalised from the price history so the home page can sort "cheap right now" without
    # reading history: kept by every observation (watches.polling.observations, for polls and
    # re-fetches alike), recomputed in bulk by watches.polling.history.refresh_stats.
    typical_price = models.PositiveIntegerField(
        verbose_name=_("typical price"),
        null=True,
        blank=True,
        help_text=_("Median effective price, last 30 days"),
    )
    low_90 = models.PositiveIntegerField(
        verbose_name=_("90-day low"),
        null=True,
        blank=True,
        help_text=_("Lowest effective price, last 90 days"),
    )
    # The same two after points (price + shipping − points, `net_price`): what a watch "after
    # points and shipping" compares with.
    typical_net = models.PositiveIntegerField(
        verbose_name=_("typical price after points"),
        null=True,
        blank=True,
        help_text=_("Median price after points, last 30 days"),
    )
    low_90_net = models.PositiveIntegerField(
        verbose_name=_("90-day low after points"),
        null=True,
        blank=True,
        help_text=_("Lowest price after points, last 90 days"),
    )
    # When typical_price and low_90 were last computed from the history itself. A re-fetch
    # soon after (the dispatcher's, minutes after the poll that detected a crossing) folds its
    # observation into them instead of reading the history again (watches.polling.observations).
    stats_at = models.DateTimeField(
        verbose_name=_("statistics computed at"), null=True, blank=True, editable=False
    )
    paused = models.BooleanField(
        verbose_name=_("paused"), default=False, help_text=_("Staff stopped tracking it")
    )
    last_polled_at = models.DateTimeField(verbose_name=_("last polled at"), null=True, blank=True)
    last_error = models.CharField(verbose_name=_("last error"), max_length=200, blank=True)
    last_error_at = models.DateTimeField(verbose_name=_("last error at"), null=True, blank=True)
    # The shape of the request whose answer is the listing's last-seen state ("item", "shop",
    # "product"): a shop feed's change is checked by the next request for the item alone.
    seen_via = models.CharField(verbose_name=_("last seen through"), max_length=10, blank=True)
    # An offer its product's page (cheapest first, one page) did not reach: the marketplace
    # holds more offers than the page answered. Not gone — asked for alone until a product
    # page shows it again (`watches.products.polling.offer_answers`, the poll plan).
    beyond_product_page = models.BooleanField(
        verbose_name=_("beyond its product's page"), default=False
    )
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)
    # What search looks in (watches.search.text.for_listing): the folded name, its readings,
    # the category's words in both languages. Kept current by save(); indexed for substring
    # search by watches.search.index (FTS5 trigram / pg_trgm).
    search_text = models.TextField(
        verbose_name=_("search text"), blank=True, default="", editable=False
    )

    class Meta:
        verbose_name = _("listing")
        verbose_name_plural = _("listings")
        constraints = [
            models.UniqueConstraint(fields=["source", "item_code"], name="listing_source_code"),
        ]
        indexes = [
            # No index on what an observation writes (`last_polled_at`, price, stock,
            # statistics): updates then stay on the listing's page on PostgreSQL, touching no
            # index (migration 0010). Polling reads every due listing to plan anyway.
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
        from watches.search.text import for_listing

        self.search_text = for_listing(self.name, self.category)
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and {"name", "category"} & set(update_fields):
            kwargs["update_fields"] = {*update_fields, "search_text"}
        super().save(*args, **kwargs)
        # A listing saved one by one (staff, add by link, the demo seed) shows at once, and
        # on its product's page, which it may have just joined.
        from watches.pages.pagecache import listings_changed, products_changed

        listings_changed([self.pk])
        products_changed([self.product_id])

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    @property
    def unit_price(self) -> Decimal | None:
        return unit_price(self.effective_price, self.units_per_pack)

    def points_at(self, at: dt.datetime | None = None) -> int:
        """The points everyone gets at `at` (now): the campaign's while it holds, what is
        left after it once it ended."""
        if at is None:
            at = timezone.now()
            if self.points_until is not None:
                deadlines.note(self.points_until)  # what it reads changes then
        return points_at(self.points, self.points_until, self.points_after, at)

    @property
    def points_now(self) -> int:
        return self.points_at()

    @property
    def campaign_on(self) -> bool | None:
        """Whether the campaign seen last is still on (None: no campaign with an end)."""
        if self.points_until is None:
            return None
        deadlines.note(self.points_until)
        return timezone.now() < self.points_until

    @property
    def net_price(self) -> int | None:
        """Price + known shipping − the points everyone gets now (実質価格)."""
        return net_price(self.price, self.shipping, self.points_now)

    @property
    def net_unit_price(self) -> Decimal | None:
        return unit_price(self.net_price, self.units_per_pack)

    @property
    def unit_low_90(self) -> Decimal | None:
        """The 90-day low per unit, to compare with a per-unit target."""
        return unit_price(self.low_90, self.units_per_pack)

    @property
    def unit_low_90_net(self) -> Decimal | None:
        """The 90-day low after points per unit."""
        return unit_price(self.low_90_net, self.units_per_pack)

    @property
    def gives_points(self) -> bool:
        """Its marketplace answers points (a watch on it counts them by default)."""
        return self.source in POINT_SOURCES

    @property
    def change_vs_typical(self) -> float | None:
        """Percent of the current effective price above (+) or below (−) the typical price."""
        current = self.effective_price
        if current is None or not self.typical_price:
            return None
        return round((current - self.typical_price) * 100 / self.typical_price, 1)

    @property
    def change_vs_typical_net(self) -> float | None:
        """The same after points: the price after points against the typical one."""
        current = self.net_price
        if current is None or not self.typical_net:
            return None
        return round((current - self.typical_net) * 100 / self.typical_net, 1)


def effective_price(price: int | None, shipping: int | None) -> int | None:
    """Price plus shipping where shipping is known: what the shopper really pays."""
    if price is None:
        return None
    return price + (shipping or 0)


def net_price(price: int | None, shipping: int | None, points: int | None) -> int | None:
    """Price plus shipping where known, less the points everyone gets (1 pt = ¥1): what the
    purchase really costs once the points are counted (実質価格). Unknown shipping stays
    unknown: it adds nothing here, and every page and message says it is unknown."""
    total = effective_price(price, shipping)
    if total is None:
        return None
    return max(total - (points or 0), 0)


def points_at(points: int, until: dt.datetime | None, after: int | None, at: dt.datetime) -> int:
    """The points everyone gets at `at`: `points` until the campaign's end (`until`,
    exclusive), `after` (what is left, none when unknown) from then on."""
    if until is None or at < until:
        return points or 0
    return after or 0


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

    # Unindexed on its own: pricepoint_listing_time leads with it and serves every lookup
    # by listing (a cascade too); a second index would only cost each point's insert.
    listing = models.ForeignKey(
        Listing,
        verbose_name=_("listing"),
        on_delete=models.CASCADE,
        related_name="price_points",
        db_index=False,
    )
    observed_at = models.DateTimeField(verbose_name=_("observed at"))
    price = models.PositiveIntegerField(verbose_name=_("price"), null=True, blank=True)
    shipping = models.PositiveIntegerField(verbose_name=_("shipping"), null=True, blank=True)
    in_stock = models.BooleanField(verbose_name=_("in stock"))
    # The points everyone got then (1 pt = ¥1): the history after points is price + shipping
    # − points, and a campaign starting or ending is a change the history records. Empty on
    # points kept before points were read (counted as none); nullable, so adding it left the
    # largest table as it was.
    points = models.PositiveIntegerField(verbose_name=_("points"), null=True, blank=True)

    class Meta:
        verbose_name = _("price point")
        verbose_name_plural = _("price points")
        indexes = [
            # History of one listing over a window (charts, typical price, 90-day low).
            models.Index(fields=["listing", "observed_at"], name="pricepoint_listing_time"),
        ]

    def __str__(self) -> str:
        return f"{self.listing_id} {self.observed_at:%Y-%m-%d %H:%M} {self.price}"

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    @property
    def net_price(self) -> int | None:
        return net_price(self.price, self.shipping, self.points)

    @classmethod
    def from_observation(cls, listing: Listing, observation) -> PricePoint:
        """The history row of a marketplace observation (watches.marketplaces.base)."""
        return cls(
            listing=listing,
            observed_at=observation.observed_at,
            price=observation.price,
            shipping=observation.shipping,
            in_stock=observation.in_stock,
            points=observation.points,
        )


class ShopFeed(models.Model):
    """What polling learned of one shop's feed on one marketplace — its items, most recently
    updated first (`watches.polling.feeds`): when page 1 was last read and what it held, how
    fast the shop's items change, and since when every change has been on a page read."""

    source = models.CharField(verbose_name=_("marketplace"), max_length=20, choices=Source.choices)
    shop = models.CharField(verbose_name=_("shop"), max_length=200)
    read_at = models.DateTimeField(verbose_name=_("read at"), null=True, blank=True)
    # The item codes of the last page 1 read, in its order: the next read finds where the
    # old order resumes, which says how many items changed in between.
    top = models.JSONField(verbose_name=_("first page"), default=list, blank=True)
    # What each of those items said (price, in stock), in the same order: where the old
    # order seems to resume, the items from there on must still say it — a catalogue
    # re-priced in its old order comes back in that order, every item changed.
    top_said = models.JSONField(verbose_name=_("first page's prices"), default=list, blank=True)
    updates_per_hour = models.FloatField(verbose_name=_("changes per hour"), null=True, blank=True)
    # Every read since this moment showed every change made before it: a listing observed
    # after it and absent from those pages held its price up to `read_at`. Null: not known.
    complete_since = models.DateTimeField(
        verbose_name=_("every change seen since"), null=True, blank=True
    )
    last_error = models.CharField(verbose_name=_("last error"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("shop feed")
        verbose_name_plural = _("shop feeds")
        constraints = [
            models.UniqueConstraint(fields=["source", "shop"], name="shopfeed_source_shop"),
        ]

    def __str__(self) -> str:
        return f"{self.source}:{self.shop}"

    def shows_unchanged(self, observed: dt.datetime | None) -> bool:
        """Whether a listing of this shop last observed at `observed`, absent from the reads
        since, is known unchanged up to `read_at`: the chain of complete reads began before
        that observation and the last read came after it."""
        return (
            self.complete_since is not None
            and self.read_at is not None
            and observed is not None
            and self.complete_since <= observed < self.read_at
        )


class FeedCheck(models.Model):
    """Whether a marketplace's shop feeds tell the truth: how often what a feed said of an
    item was then confirmed, or contradicted, by a request for that item alone soon after —
    the state it showed, or, for an item a complete read did not show, that it had not
    changed. That a price change moves an item up its shop's feed is not documented
    (docs/marketplaces.md): the poll plan trusts the feeds only while this says so."""

    source = models.CharField(
        verbose_name=_("marketplace"), max_length=20, choices=Source.choices, unique=True
    )
    confirmed = models.PositiveIntegerField(verbose_name=_("confirmed"), default=0)
    contradicted = models.PositiveIntegerField(verbose_name=_("contradicted"), default=0)

    class Meta:
        verbose_name = _("feed check")
        verbose_name_plural = _("feed checks")

    def __str__(self) -> str:
        return f"{self.source}: {self.confirmed} confirmed, {self.contradicted} contradicted"


class Device(models.Model):
    """An anonymous person: their browser is their identity. Only a hash of the token that
    their cookie carries is stored."""

    token_hash = models.CharField(verbose_name=_("token hash"), max_length=64, unique=True)
    channel = models.CharField(
        verbose_name=_("channel"), max_length=20, choices=Channel.choices, default=Channel.WEBPUSH
    )
    language = models.CharField(verbose_name=_("language"), max_length=10, default="ja")
    push_endpoint = models.URLField(verbose_name=_("push endpoint"), max_length=1000, blank=True)
    push_p256dh = models.CharField(verbose_name=_("push key (p256dh)"), max_length=100, blank=True)
    push_auth = models.CharField(verbose_name=_("push auth secret"), max_length=50, blank=True)
    push_active = models.BooleanField(verbose_name=_("push active"), default=False)
    push_subscribed_at = models.DateTimeField(
        verbose_name=_("push subscribed at"), null=True, blank=True
    )
    notify_via = models.CharField(
        verbose_name=_("tell by"),
        max_length=10,
        choices=NotifyVia.choices,
        default=NotifyVia.PUSH,
    )
    # The e-mail address (watches.email_address): nothing but its confirmation is sent to it
    # until `email_confirmed_at` is set (double opt-in); hard bounces count up, and at
    # EMAIL_BOUNCE_LIMIT `email_disabled_at` stops it. Changing it starts over.
    email = models.EmailField(verbose_name=_("e-mail address"), max_length=254, blank=True)
    email_confirmed_at = models.DateTimeField(
        verbose_name=_("e-mail confirmed at"), null=True, blank=True
    )
    email_bounces = models.PositiveSmallIntegerField(verbose_name=_("hard bounces"), default=0)
    email_disabled_at = models.DateTimeField(
        verbose_name=_("e-mail disabled at"), null=True, blank=True
    )
    # Quiet hours: no notification goes out from `quiet_start` until `quiet_end` (local
    # times in `time_zone`; the window may cross midnight). Off while either is empty. A row
    # due inside the window waits for its end, then is re-checked (outbox.holds).
    quiet_start = models.TimeField(verbose_name=_("quiet hours from"), null=True, blank=True)
    quiet_end = models.TimeField(verbose_name=_("quiet hours until"), null=True, blank=True)
    time_zone = models.CharField(verbose_name=_("time zone"), max_length=64, default="Asia/Tokyo")
    # The person says they are an LYP premium member: the points Yahoo! Shopping gives only
    # such members count for their watches "after points" (shown to everyone, counted for
    # nobody else). Off until they say so.
    lyp_premium = models.BooleanField(verbose_name=_("LYP premium member"), default=False)
    # A pending "move to another browser" link: only the hash of its token, and when it stops
    # working. Null when there is none; redeeming it clears both (single use).
    transfer_token_hash = models.CharField(
        verbose_name=_("transfer token hash"), max_length=64, null=True, blank=True, unique=True
    )
    transfer_expires_at = models.DateTimeField(
        verbose_name=_("transfer expires at"), null=True, blank=True
    )
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)
    last_seen_at = models.DateTimeField(verbose_name=_("last seen at"), default=timezone.now)

    class Meta:
        verbose_name = _("device")
        verbose_name_plural = _("devices")
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
        return gettext("device %(id)s") % {"id": self.short_id}

    @property
    def short_id(self) -> str:
        return self.token_hash[:8]

    @property
    def can_receive(self) -> bool:
        """Whether the device's channel can reach it at all right now."""
        if self.channel == Channel.WEBPUSH:
            return self.push_active and bool(self.push_endpoint)
        return True

    @property
    def email_active(self) -> bool:
        """A confirmed address that has not been disabled by bounces."""
        return bool(self.email and self.email_confirmed_at and not self.email_disabled_at)

    @property
    def receiving_channels(self) -> list[str]:
        """The channels a notification goes out on right now: one outbox row each. Empty when
        none can reach the device (then polling keeps what it would have told, watches.missed)."""
        channels = []
        if self.wants_push and self.can_receive:
            channels.append(self.channel)
        if self.wants_email and self.email_active:
            channels.append(Channel.EMAIL)
        return channels

    @property
    def wants_push(self) -> bool:
        """Asks to be told on its own push channel (Web Push, console), reachable or not."""
        return self.notify_via in (NotifyVia.PUSH, NotifyVia.BOTH)

    @property
    def wants_email(self) -> bool:
        """Asks to be told at its e-mail address, confirmed or not."""
        return self.notify_via in (NotifyVia.EMAIL, NotifyVia.BOTH)

    def chooses(self, channel: str) -> bool:
        """Whether the device asks to be told on `channel` as `notify_via` says now."""
        return self.wants_email if channel == Channel.EMAIL else self.wants_push

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        """The zone its quiet hours are set in (Tokyo for one the system no longer knows)."""
        try:
            return zoneinfo.ZoneInfo(self.time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return zoneinfo.ZoneInfo("Asia/Tokyo")

    def quiet_until(self, now: dt.datetime) -> dt.datetime | None:
        """When the quiet window that contains `now` ends, or None when `now` is outside it
        (or there is none). The window is `start <= t < end`, or, crossing midnight
        (start > end), `t >= start or t < end`, in local times of `time_zone`."""
        start, end = self.quiet_start, self.quiet_end
        if start is None or end is None or start == end:
            return None
        zone = self.zone
        local = now.astimezone(zone)
        t = local.time().replace(tzinfo=None)
        if start < end:
            inside, ends_tomorrow = start <= t < end, False
        else:
            inside, ends_tomorrow = t >= start or t < end, t >= start
        if not inside:
            return None
        day = local.date() + dt.timedelta(days=1 if ends_tomorrow else 0)
        ending = dt.datetime.combine(day, end, tzinfo=zone)
        first = ending.astimezone(dt.UTC)
        if first > now:
            return first
        # The night the clocks go back, the end's local time comes twice and `now` is past
        # the first: the window ends at the second.
        return ending.replace(fold=1).astimezone(dt.UTC)


class LiveWatchManager(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(removed_at__isnull=True)


class Watch(models.Model):
    """One device watching one listing with one trigger — or, with `product`, every shop's
    offer of a product ("any shop at or below ¥X"). A product watch's `listing` is the offer
    it follows now: the cheapest when it was made, then the one each detection fired on, so
    the dispatcher's re-fetch and message name that shop."""

    # Unindexed on its own: watch_by_device leads with it.
    device = models.ForeignKey(
        Device,
        verbose_name=_("device"),
        on_delete=models.CASCADE,
        related_name="watches",
        db_index=False,
    )
    listing = models.ForeignKey(
        Listing, verbose_name=_("listing"), on_delete=models.CASCADE, related_name="watches"
    )
    # Indexed (the foreign key's own index): product polling reads a product's watches.
    product = models.ForeignKey(
        Product,
        verbose_name=_("product"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="watches",
    )
    trigger = models.CharField(verbose_name=_("trigger"), max_length=20, choices=Trigger.choices)
    target_price = models.PositiveIntegerField(
        verbose_name=_("target price"),
        null=True,
        blank=True,
        help_text=_("Yen (per unit when comparing unit prices)"),
    )
    drop_percent = models.PositiveSmallIntegerField(
        verbose_name=_("drop percent"), null=True, blank=True
    )
    use_unit_price = models.BooleanField(verbose_name=_("compare unit prices"), default=False)
    # Judge on the price after points and shipping (price + shipping − the points everyone
    # gets, `net_price`) instead of the price incl. shipping. The pages make new watches so
    # where the marketplace gives points; watches made before points were read keep False.
    after_points = models.BooleanField(verbose_name=_("after points"), default=False)
    paused = models.BooleanField(verbose_name=_("paused"), default=False)
    removed_at = models.DateTimeField(verbose_name=_("removed at"), null=True, blank=True)
    # The baseline last delivered (the compared value: effective or unit price), moved only
    # when a notification is really sent.
    last_notified_price = models.DecimalField(
        verbose_name=_("last notified price"),
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
    )
    last_notified_at = models.DateTimeField(
        verbose_name=_("last notified at"), null=True, blank=True
    )
    # When the detection behind that notification was made. A row of an earlier detection is
    # old news once it is told (`triggers.recheck`: only a further drop still goes out); a
    # row of the same detection on the device's other channel is not — the person chose both.
    last_notified_detected_at = models.DateTimeField(
        verbose_name=_("last notified detection"), null=True, blank=True
    )
    # The latest detection this watch could not be told about because its device could not
    # be reached (notifications off): the effective price then, and when it was first seen
    # at that price. Shown on the history page as "we would have told you". Written by
    # polling through watches.missed, never by the outbox.
    missed_price = models.PositiveIntegerField(
        verbose_name=_("missed price"), null=True, blank=True
    )
    missed_at = models.DateTimeField(verbose_name=_("missed at"), null=True, blank=True)
    created_at = models.DateTimeField(verbose_name=_("created at"), default=timezone.now)
    # When the watch began to compare what it compares now (its trigger, per unit or not,
    # after points or not), when that changed after it was made: the baseline is cleared
    # then, and what happened before — a stock-out and restock told under the old settings,
    # or never watched for — is not news to judge.
    judged_since = models.DateTimeField(verbose_name=_("judged since"), null=True, blank=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    objects = models.Manager()
    live = LiveWatchManager()

    class Meta:
        verbose_name = _("watch")
        # "watches" alone is the admin's column of how many watches a listing has.
        verbose_name_plural = pgettext_lazy("model name", "watches")
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


class MarketplaceHalt(models.Model):
    """A marketplace that answered a configuration fault (`FetchKind.CONFIG`: a retired API
    version, a refused key or application id, a site or IP address its registration does not
    allow). While the row exists no process of the fleet asks it anything but one probe every
    MARKETPLACE_PROBE_SECONDS; a probe it answers deletes the row
    (`watches.marketplaces.halts`)."""

    source = models.CharField(
        verbose_name=_("marketplace"), max_length=20, choices=Source.choices, unique=True
    )
    since = models.DateTimeField(verbose_name=_("since"))
    # What to fix, naming the setting or the registration, then what the marketplace said:
    # the adapter's words (ids as their label, keys never).
    detail = models.TextField(verbose_name=_("detail"))
    # The application whose fault halted it (its id's label), when the marketplace has
    # several: the probe goes out under it. Empty: any id.
    application = models.CharField(
        verbose_name=_("application"), max_length=100, blank=True, default=""
    )
    # The next probe may go out from then: the one process whose conditional UPDATE moves it
    # on sends it.
    probe_after = models.DateTimeField(verbose_name=_("next probe after"))

    class Meta:
        verbose_name = _("marketplace halt")
        verbose_name_plural = _("marketplace halts")

    def __str__(self) -> str:
        return f"{self.get_source_display()} halted since {self.since:%Y-%m-%d %H:%M}"
