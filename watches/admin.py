"""Staff's view of the domain."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone
from django.utils.html import format_html

from watches.admin_intake import ListingIntakeAdminMixin
from watches.models import Device, Listing, Watch


class PollingHealthFilter(admin.SimpleListFilter):
    """Is price polling keeping up with this listing?"""

    title = "polling health"
    parameter_name = "polling"

    def lookups(self, request, model_admin):
        return [
            ("error", "Last poll failed"),
            ("stale", "Not polled for 2 intervals"),
            ("never", "Never polled"),
            ("ok", "Healthy"),
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
    title = "push subscription"
    parameter_name = "subscription"

    def lookups(self, request, model_admin):
        return [("active", "Active"), ("inactive", "Inactive (gone or revoked)"), ("none", "None")]

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
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("live", "Live"), ("paused", "Paused"), ("removed", "Removed")]

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
class ListingAdmin(ListingIntakeAdminMixin, admin.ModelAdmin):
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
    )
    list_filter = ("source", "paused", "in_stock", PollingHealthFilter, "category")
    search_fields = ("name", "item_code")

    def get_queryset(self, request) -> QuerySet[Listing]:
        # One grouped query for the whole page instead of a count per listing.
        return (
            super()
            .get_queryset(request)
            .annotate(live_watch_count=Count("watches", filter=Q(watches__removed_at__isnull=True)))
        )

    @admin.display(description="watches", ordering="live_watch_count")
    def live_watches(self, listing: Listing) -> int:
        return listing.live_watch_count

    @admin.display(description="polling")
    def polling(self, listing: Listing) -> str:
        if listing.paused:
            return format_html('<span title="{}">⏸ paused</span>', "staff stopped tracking it")
        if listing.last_error_at and (
            listing.last_polled_at is None or listing.last_error_at > listing.last_polled_at
        ):
            return format_html(
                '<span style="color: var(--error-fg)" title="{}">✖ failing</span>',
                listing.last_error,
            )
        if listing.last_polled_at is None:
            return "never polled"
        age = timezone.now() - listing.last_polled_at
        if age > 2 * dt.timedelta(minutes=settings.POLL_MINUTES):
            return format_html(
                '<span style="color: var(--error-fg)">stale ({} min)</span>',
                int(age.total_seconds() // 60),
            )
        return "✔ ok"


@admin.register(Watch)
class WatchAdmin(admin.ModelAdmin):
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
    raw_id_fields = ("listing", "device")
    search_fields = ("=id", "listing__name", "listing__item_code", "^device__token_hash")

    @admin.display(description="device", ordering="device__token_hash")
    def device_short_id(self, watch: Watch) -> str:
        return watch.device.short_id

    @admin.display(description="state")
    def state(self, watch: Watch) -> str:
        if watch.removed_at:
            return "removed"
        return "paused" if watch.paused else "live"


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = (
        "short_id",
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

    @admin.display(description="watches", ordering="live_watch_count")
    def live_watches(self, device: Device) -> int:
        return device.live_watch_count

    @admin.display(description="subscription", ordering="push_active")
    def subscription(self, device: Device) -> str:
        if not device.push_endpoint:
            return "none"
        return "active" if device.push_active else "inactive"
