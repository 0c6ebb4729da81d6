"""Staff's view of the domain. The demo catalogue is editable, so anyone can move a price
and watch the outbox react."""

from __future__ import annotations

from django.contrib import admin

from watches.admin_intake import ListingIntakeAdminMixin
from watches.models import DemoProduct, Device, Listing, Watch


@admin.register(Listing)
class ListingAdmin(ListingIntakeAdminMixin, admin.ModelAdmin):
    list_display = ("name", "source", "item_code", "price", "shipping", "in_stock", "paused", "last_polled_at", "last_error")
    list_filter = ("source", "paused", "in_stock", "category")
    search_fields = ("name", "item_code")


@admin.register(Watch)
class WatchAdmin(admin.ModelAdmin):
    list_display = ("id", "listing", "device", "trigger", "target_price", "drop_percent", "paused", "removed_at", "last_notified_price", "last_notified_at")
    list_filter = ("trigger", "paused")
    list_select_related = ("listing", "device")
    raw_id_fields = ("listing", "device")


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ("short_id", "channel", "language", "push_active", "created_at", "last_seen_at")
    list_filter = ("channel", "push_active", "language")
    # The token hash is an identity: shown, never editable.
    readonly_fields = ("token_hash", "push_endpoint", "push_p256dh", "push_auth", "created_at", "last_seen_at")


@admin.register(DemoProduct)
class DemoProductAdmin(admin.ModelAdmin):
    list_display = ("item_code", "name", "price", "shipping", "in_stock", "fault", "updated_at")
    list_editable = ("price", "in_stock", "fault")
    list_filter = ("in_stock", "category", "fault")
    search_fields = ("item_code", "name")
