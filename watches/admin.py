"""Staff's view of the domain."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.contrib import admin
from django.db import models
from django.db.models import Count, F, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from watches import services
from watches.admin_intake import ListingIntakeAdminMixin
from watches.models import Device, FeedCheck, Listing, Product, ShopFeed, Watch
from watches.pausing import PauseResult, pause_listings
from watches.polling import feeds, observations
from watches.products.watches import describe_product
from yasugoro.admin_mixins import CheckedActionIdsMixin, PlainActionCheckboxMixin

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _LiveWatches(TypedDict):
    live_watch_count: int  # the changelist's annotation (get_queryset)


class _OfferCount(TypedDict):
    offer_count: int  # the changelist's annotation (get_queryset)


# (label, url) of a page elsewhere about one listing, e.g. the outbox's notifications for it.
ListingLink = Callable[[Listing], tuple[str, str]]
_listing_links: list[ListingLink] = []


def add_listing_link(link: ListingLink) -> None:
    """Let another app link each listing's row and page to its own pages about the listing,
    without this app knowing about it. Idempotent."""
    if link not in _listing_links:
        _listing_links.append(link)


# What polling observes of a listing (`watches.polling.observations`): shown on its page, never
# posted back, so a poll that lands while staff edit the page is not overwritten by the values
# the page was drawn with — a price nobody observed, maybe under a fresh `last_polled_at`.
POLLED_FIELDS = (
    *observations.WRITTEN,
    # Written by product polling: whether the product's page of offers reaches the offer.
    "beyond_product_page",
)

# An address typed without its scheme is an https one: the marketplaces serve nothing else,
# and an http image on our https pages would be blocked as mixed content.
HTTPS_URLS: Mapping[type[models.Field], Mapping[str, Any]] = {
    models.URLField: {"assume_scheme": "https"}
}


class PollingHealthFilter(admin.SimpleListFilter):
    """Is price polling keeping up with this listing?"""

    title = _("polling health")
    parameter_name = "polling"

    def lookups(self, request, model_admin):
        return [
            ("error", _("Last poll failed")),
            ("stale", _("Not polled for 2 intervals")),
            ("never", _("Never polled")),
            ("ok", _("Healthy")),
        ]

    def queryset(self, request, queryset):
        stale = timezone.now() - 2 * dt.timedelta(minutes=settings.POLL_MINUTES)
        # The last poll failed: an error newer than the last successful poll.
        failing = Q(last_error_at__isnull=False) & (
            Q(last_polled_at__isnull=True) | Q(last_error_at__gt=F("last_polled_at"))
        )
        match self.value():
            case "error":
                return queryset.filter(failing)
            case "stale":
                return queryset.filter(paused=False, last_polled_at__lt=stale)
            case "never":
                return queryset.filter(last_polled_at__isnull=True)
            case "ok":
                return queryset.filter(last_polled_at__gte=stale).exclude(failing)
        return queryset


class SubscriptionFilter(admin.SimpleListFilter):
    title = _("push subscription")
    parameter_name = "subscription"

    def lookups(self, request, model_admin):
        return [
            ("active", _("Active")),
            ("inactive", _("Inactive (gone or revoked)")),
            ("none", _("None")),
        ]

    def queryset(self, request, queryset):
        match self.value():
            case "active":
                return queryset.filter(push_active=True).exclude(push_endpoint="")
            case "inactive":
                return queryset.filter(push_active=False).exclude(push_endpoint="")
            case "none":
                return queryset.filter(push_endpoint="")
        return queryset


class WatchStateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("live", _("Live")), ("paused", _("Paused")), ("removed", _("Removed"))]

    def queryset(self, request, queryset):
        match self.value():
            case "live":
                return queryset.filter(removed_at__isnull=True, paused=False)
            case "paused":
                return queryset.filter(removed_at__isnull=True, paused=True)
            case "removed":
                return queryset.filter(removed_at__isnull=False)
        return queryset


@admin.register(Listing)
class ListingAdmin(
    CheckedActionIdsMixin, PlainActionCheckboxMixin, ListingIntakeAdminMixin, admin.ModelAdmin
):
    list_display = (
        "name",
        "source",
        "item_code",
        "price",
        "shipping",
        "in_stock",
        "paused",
        "live_watches",
        "polling",
        "last_polled_at",
        "last_error",
        "elsewhere",
    )
    list_filter = ("source", "paused", "in_stock", PollingHealthFilter, "category")
    search_fields = ("name", "item_code", "=jan")
    # A listing's JAN code, set here, lets its page find every shop's offer (its product).
    raw_id_fields = ("product",)
    formfield_overrides = HTTPS_URLS
    actions = ["pause_selected"]
    list_per_page = 50

    def get_readonly_fields(self, request, obj=None):
        # On its change page, what polling observed, and the links to other apps' pages
        # about this listing.
        fields = tuple(super().get_readonly_fields(request, obj))
        return (*fields, *POLLED_FIELDS, "elsewhere") if obj is not None else fields

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if obj is not None and "elsewhere" not in fields:
            fields.append("elsewhere")
        return fields

    @admin.display(description=_("elsewhere"))
    def elsewhere(self, listing: Listing) -> str:
        links = [link(listing) for link in _listing_links]
        return format_html_join(" · ", '<a href="{1}">{0}</a>', links) or "—"

    @admin.action(
        description=_("Pause tracking, and drop their pending notifications"),
        permissions=["change"],
    )
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Listing]) -> None:
        result = pause_listings(
            queryset.values_list("id", flat=True), actor=request.user.get_username()
        )
        self.message_user(request, _pause_message(result))

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        # Only the columns staff changed are written: a poll may have written the others
        # since this request read the listing. `paused` is left to the rules below, which
        # pause (and report it) or resume this listing from the state it is in.
        columns = {field.name for field in obj._meta.concrete_fields}
        obj.save(update_fields=[f for f in form.changed_data if f in columns and f != "paused"])
        if "paused" not in form.changed_data:
            return
        if obj.paused:
            result = pause_listings([obj.pk], actor=request.user.get_username())
            self.message_user(request, _pause_message(result))
        else:
            services.resume_listings([obj.pk])
        obj.refresh_from_db(fields=["paused", "last_polled_at"])

    def get_queryset(self, request) -> QuerySet[Listing]:
        # One grouped query for the whole page instead of a count per listing.
        return (
            super()
            .get_queryset(request)
            .annotate(live_watch_count=Count("watches", filter=Q(watches__removed_at__isnull=True)))
        )

    @admin.display(description=_("watches"), ordering="live_watch_count")
    def live_watches(self, listing: WithAnnotations[Listing, _LiveWatches]) -> int:
        return listing.live_watch_count

    @admin.display(description=_("polling"))
    def polling(self, listing: Listing) -> str:
        if listing.paused:
            return format_html(
                '<span title="{}">⏸ {}</span>',
                gettext("staff stopped tracking it"),
                gettext("paused"),
            )
        if listing.last_error_at and (
            listing.last_polled_at is None or listing.last_error_at > listing.last_polled_at
        ):
            return format_html(
                '<span class="ob-bad-text" title="{}">✖ {}</span>',
                listing.last_error,
                gettext("failing"),
            )
        if listing.last_polled_at is None:
            return gettext("never polled")
        age = timezone.now() - listing.last_polled_at
        if age > 2 * dt.timedelta(minutes=settings.POLL_MINUTES):
            return format_html(
                '<span class="ob-bad-text">{}</span>',
                gettext("stale (%(minutes)s min)") % {"minutes": int(age.total_seconds() // 60)},
            )
        return "✔ " + gettext("ok")


def _pause_message(result: PauseResult) -> str:
    text = ngettext("%(count)d listing paused", "%(count)d listings paused", result.paused) % {
        "count": result.paused
    }
    for report in result.reports:
        text += gettext("; notifications: %(report)s") % {"report": report}
    return text


@admin.register(Watch)
class WatchAdmin(CheckedActionIdsMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "listing",
        "device_short_id",
        "trigger",
        "target_price",
        "drop_percent",
        "state",
        "last_notified_price",
        "last_notified_at",
        "created_at",
    )
    list_filter = ("trigger", WatchStateFilter, "use_unit_price", "listing__source")
    list_select_related = ("listing", "device")
    raw_id_fields = ("listing", "device", "product")
    search_fields = ("=id", "listing__name", "listing__item_code", "^device__token_hash")

    @admin.display(description=_("device"), ordering="device__token_hash")
    def device_short_id(self, watch: Watch) -> str:
        return watch.device.short_id

    @admin.display(description=_("state"))
    def state(self, watch: Watch) -> str:
        if watch.removed_at:
            return gettext("removed")
        return gettext("paused") if watch.paused else gettext("live")


@admin.register(Device)
class DeviceAdmin(CheckedActionIdsMixin, admin.ModelAdmin):
    list_display = (
        "device",
        "channel",
        "language",
        "subscription",
        "live_watches",
        "push_subscribed_at",
        "created_at",
        "last_seen_at",
    )
    list_filter = ("channel", SubscriptionFilter, "language")
    search_fields = ("^token_hash",)
    # The token hash is an identity: shown, never editable. A pending transfer link is the
    # device's business alone: its hash is not shown, its expiry cannot be edited.
    exclude = ("transfer_token_hash",)
    readonly_fields = (
        "token_hash",
        "push_endpoint",
        "push_p256dh",
        "push_auth",
        "transfer_expires_at",
        "created_at",
        "last_seen_at",
    )

    def get_queryset(self, request) -> QuerySet[Device]:
        return (
            super()
            .get_queryset(request)
            .annotate(live_watch_count=Count("watches", filter=Q(watches__removed_at__isnull=True)))
        )

    @admin.display(description=_("device"), ordering="token_hash")
    def device(self, device: Device) -> str:
        return device.short_id

    @admin.display(description=_("watches"), ordering="live_watch_count")
    def live_watches(self, device: WithAnnotations[Device, _LiveWatches]) -> int:
        return device.live_watch_count

    @admin.display(description=_("subscription"), ordering="push_active")
    def subscription(self, device: Device) -> str:
        if not device.push_endpoint:
            return gettext("none")
        return gettext("active") if device.push_active else gettext("inactive")


@admin.register(Product)
class ProductAdmin(CheckedActionIdsMixin, admin.ModelAdmin):
    """Products (one per JAN code) and how many shops offer them. The pack size set here is
    every offer's too (`watches.products.watches.describe_product`)."""

    list_display = ("jan", "name", "units_per_pack", "unit_label", "offers", "last_polled_at")
    search_fields = ("=jan", "name")
    readonly_fields = ("jan", "last_polled_at", "last_error", "created_at")
    fields = ("jan", "name", "units_per_pack", "unit_label", "image_url", *readonly_fields[1:])
    formfield_overrides = HTTPS_URLS
    show_full_result_count = False

    def get_queryset(self, request) -> QuerySet[Product]:
        return super().get_queryset(request).annotate(offer_count=Count("offers"))

    @admin.display(description=_("Offers"), ordering="offer_count")
    def offers(self, product: WithAnnotations[Product, _OfferCount]) -> int:
        return product.offer_count

    def has_add_permission(self, request) -> bool:
        return False  # products come from their JAN code's offers (the pages' intake)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if {"units_per_pack", "unit_label"} & set(form.changed_data):
            describe_product(obj, units_per_pack=obj.units_per_pack, unit_label=obj.unit_label)


class _ReadOnlyAdmin(CheckedActionIdsMixin, admin.ModelAdmin):
    """What polling learned, shown to staff as it is: written by polling alone."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ShopFeed)
class ShopFeedAdmin(_ReadOnlyAdmin):
    """Each shop's feed as the poll plan knows it: when page 1 was last read, how fast the
    shop's items change, since when every change was seen (`watches.polling.feeds`)."""

    list_display = ("shop", "source", "read_at", "updates_per_hour", "complete_since", "last_error")
    list_filter = ("source",)
    search_fields = ("=shop",)
    ordering = ("-read_at",)
    show_full_result_count = False


@admin.register(FeedCheck)
class FeedCheckAdmin(_ReadOnlyAdmin):
    """Whether each marketplace's shop feeds are trusted: how often a request for the item
    alone soon after confirmed what a feed said."""

    list_display = ("source", "confirmed", "contradicted", "trusted")

    @admin.display(description=_("Trusted"), boolean=True)
    def trusted(self, check: FeedCheck) -> bool:
        return feeds.trusted(check.source)
