"""The demo catalogue in admin: anyone with staff access can move a price, the stock or a
simulated fault and watch the outbox react."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.contrib import admin
from django.db import models
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from demo.market import hold
from demo.models import DemoProduct
from watches.models import Listing, Source
from yasugoro.admin_mixins import CheckedActionIdsMixin

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

# A change to one of these is a price or stock set by hand: the demo tick then holds off.
_HELD_FIELDS = frozenset({"price", "shipping", "in_stock"})


class _SeenPrice(TypedDict):
    seen_price: int | None  # the changelist's annotation (get_queryset)


@admin.register(DemoProduct)
class DemoProductAdmin(CheckedActionIdsMixin, admin.ModelAdmin):
    list_display = (
        "item_code",
        "name",
        "price",
        "shipping",
        "in_stock",
        "point_rate",
        "points_until",
        "fault",
        "last_seen_price",
        "held_until",
        "updated_at",
    )
    list_editable = ("price", "in_stock", "fault")
    list_filter = ("in_stock", "category", "fault")
    search_fields = ("item_code", "name")
    # An image address typed without a scheme is taken as https (Django 6's default).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_queryset(self, request) -> QuerySet[DemoProduct]:
        # What polling last saw of this product on the demo marketplace, beside what staff
        # set: the gap is what the next poll will notice.
        seen = Listing.objects.filter(source=Source.DEMO, item_code=OuterRef("item_code"))
        return super().get_queryset(request).annotate(seen_price=Subquery(seen.values("price")[:1]))

    def save_model(self, request, obj: DemoProduct, form, change: bool) -> None:
        # Staff who set the hold themselves (or cleared it) keep what they set.
        if _HELD_FIELDS & set(form.changed_data) and "held_until" not in form.changed_data:
            hold(obj, timezone.now())
        super().save_model(request, obj, form, change)

    @admin.display(description=_("last seen by polling"), ordering="seen_price")
    def last_seen_price(self, product: WithAnnotations[DemoProduct, _SeenPrice]) -> int | None:
        return product.seen_price
