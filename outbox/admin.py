"""Staff's view of the outbox: read-only, filterable, with counts per status."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count

from outbox.models import DispatchRun, Outbox, OutboxEvent, Status


class OutboxEventInline(admin.TabularInline):
    model = OutboxEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_status", "to_status", "reason", "detail", "actor")
    readonly_fields = fields
    ordering = ("at", "id")

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Outbox)
class OutboxAdmin(admin.ModelAdmin):
    list_display = (
        "id", "watch", "device", "channel", "trigger", "status", "reason", "retry_count",
        "detected_at", "next_attempt_at", "sent_at",
    )
    list_filter = ("status", "reason", "channel", "trigger")
    list_select_related = ("watch__listing", "device")
    search_fields = ("=id", "watch__listing__name", "watch__listing__item_code")
    ordering = ("-id",)
    show_full_result_count = False
    inlines = [OutboxEventInline]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        counts = dict(Outbox.objects.values_list("status").annotate(n=Count("id")).order_by())
        extra_context = {
            **(extra_context or {}),
            "status_counts": [(label, counts.get(value, 0), value) for value, label in Status.choices],
        }
        return super().changelist_view(request, extra_context)


@admin.register(DispatchRun)
class DispatchRunAdmin(admin.ModelAdmin):
    list_display = ("started_at", "holder", "claimed", "sent", "dropped", "retry", "failed", "recovered", "error")
    ordering = ("-started_at",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
