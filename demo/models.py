"""The demo marketplace's side of the world: its catalogue, which staff and the demo tick
edit. The marketplace adapter (demo.marketplace) reads it like a real marketplace's API."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class DemoProduct(models.Model):
    """The built-in demo marketplace's catalogue. Staff edit price, stock and even a simulated
    fault in admin, and watch the outbox react."""

    class Fault(models.TextChoices):
        NONE = "", _("None (answers normally)")
        RATE_LIMITED = "rate_limited", _("Rate limited")
        SERVER = "server", _("Server error")
        NETWORK = "network", _("Network error")
        BAD_RESPONSE = "bad_response", _("Malformed response")

    item_code = models.CharField(verbose_name=_("item code"), max_length=100, unique=True)
    # The product it is an offer of: the demo answers a JAN code with every shop's offer.
    jan = models.CharField(verbose_name=_("JAN code"), max_length=13, blank=True, db_index=True)
    name = models.CharField(verbose_name=_("name"), max_length=500)
    shop_name = models.CharField(
        verbose_name=_("shop"), max_length=200, default="Yasugoro Demo Shop"
    )
    category = models.CharField(verbose_name=_("category"), max_length=100, blank=True)
    image_url = models.URLField(verbose_name=_("image URL"), max_length=1000, blank=True)
    units_per_pack = models.PositiveIntegerField(
        verbose_name=_("units per pack"), null=True, blank=True
    )
    unit_label = models.CharField(verbose_name=_("unit"), max_length=20, blank=True)
    price = models.PositiveIntegerField(verbose_name=_("price"))
    shipping = models.PositiveIntegerField(verbose_name=_("shipping"), null=True, blank=True)
    in_stock = models.BooleanField(verbose_name=_("in stock"), default=True)
    # A points campaign (demo.market.tick_campaigns, admin): `point_rate` points per ¥100 of
    # the tax-excluded price — Rakuten Ichiba's rule (watches.points) — while the window
    # from `points_from` until `points_until` (exclusive; either may be open) holds, the
    # standard 1 outside it; and `member_rate` more for premium members only (as Yahoo!
    # Shopping's LYP premium).
    point_rate = models.PositiveSmallIntegerField(
        verbose_name=_("point multiplier"),
        default=1,
        help_text=_("1 is the standard 1 %; 5 is a five-times campaign"),
    )
    points_from = models.DateTimeField(verbose_name=_("campaign from"), null=True, blank=True)
    points_until = models.DateTimeField(verbose_name=_("campaign until"), null=True, blank=True)
    member_rate = models.PositiveSmallIntegerField(
        verbose_name=_("premium members' extra multiplier"), default=0
    )
    fault = models.CharField(
        verbose_name=_("simulated fault"),
        max_length=20,
        choices=Fault.choices,
        blank=True,
        default="",
    )
    # Set when a person changes the price or stock (`demo_market set`, admin): the demo tick
    # leaves the product alone until then, so what they set is what polling and the
    # dispatcher see.
    held_until = models.DateTimeField(
        verbose_name=_("held until"),
        null=True,
        blank=True,
        help_text=_("The demo tick leaves a price or stock set by hand alone until then"),
    )
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("demo product")
        verbose_name_plural = _("demo products")

    def __str__(self) -> str:
        return f"{self.item_code} {self.name}"
