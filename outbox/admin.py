"""Staff's view of the outbox: the overview (counts and reasons at a glance), a changelist
that stays fast on a million rows, the story of every notification, and safe levers.

The admin adds no logic of its own: numbers come from `outbox.stats`, their arrangement from
`outbox.overview`, and every lever is a function of `outbox.levers` that moves rows through
the state machine. Nothing here writes an outbox row with `save()`.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from outbox import levers
from outbox.models import DUE_STATUSES, DispatchRun, Outbox, OutboxEvent, Status
from outbox.overview import Overview, build_overview
from outbox.paginator import CappedCountPaginator
from outbox.stats import WINDOWS, due_now, outbox_stats, stuck_in_sending
from watches import admin as watches_admin
from watches.models import Listing, Watch

# The keys an attempt's event data may hold, in the order a person reads them.
ATTEMPT_KEYS = (
    "fresh",
    "value",
    "line",
    "message",
    "fetch_error",
    "delivery_error",
    "status_code",
    "detail",
)


def pretty_json(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        known = {key: value[key] for key in ATTEMPT_KEYS if key in value}
        value = {**known, **{key: v for key, v in value.items() if key not in known}}
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def admin_link(obj: Any, text: Any) -> str:
    if obj is None:
        return "—"
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text)


def _when(moment: dt.datetime | None) -> str:
    """Compact local time for a list column; the full one is in the tooltip."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    return format_html(
        '<span class="ob-when" title="{}">{}</span>',
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        local.strftime("%m-%d %H:%M"),
    )


class SinceFilter(admin.SimpleListFilter):
    """Rows whose status changed within a window: what the overview's window columns count."""

    title = "status changed within"
    parameter_name = "since"

    def lookups(self, request, model_admin):
        return [(key, key) for key, length in WINDOWS.items() if length is not None]

    def queryset(self, request, queryset):
        length = WINDOWS.get(self.value() or "")
        if length is None:
            return queryset
        return queryset.filter(updated_at__gte=timezone.now() - length)


class QueueFilter(admin.SimpleListFilter):
    """Where a live row stands in the queue."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        return [
            ("due", "Due now"),
            ("waiting", "Waiting for a later attempt"),
            ("stuck", "Stuck in sending (lease expired)"),
        ]

    def queryset(self, request, queryset):
        # The same conditions the overview counts with, so its links list what it counted.
        now = timezone.now()
        match self.value():
            case "due":
                return queryset.filter(due_now(now))
            case "waiting":
                return queryset.filter(status__in=DUE_STATUSES, next_attempt_at__gt=now)
            case "stuck":
                return queryset.filter(stuck_in_sending(now))
        return queryset


class OutboxEventInline(admin.TabularInline):
    """The row's story: every transition, oldest first. Append-only, so read-only."""

    model = OutboxEvent
    extra = 0
    can_delete = False
    verbose_name = "event"
    verbose_name_plural = "timeline"
    fields = ("when", "from_status", "to_status", "reason", "detail", "actor", "data_pretty")
    readonly_fields = fields
    ordering = ("at", "id")

    @admin.display(description="at")
    def when(self, event: OutboxEvent) -> str:
        # To the second: a retry story happens within minutes.
        return timezone.localtime(event.at).strftime("%Y-%m-%d %H:%M:%S")

    @admin.display(description="data")
    def data_pretty(self, event: OutboxEvent) -> str:
        if event.data is None:
            return ""
        return format_html('<pre class="ob-json">{}</pre>', pretty_json(event.data))

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Outbox)
class OutboxAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "watch_col",
        "listing_col",
        "device_col",
        "channel_col",
        "trigger_col",
        "status_col",
        "reason",
        "retries",
        "detected",
        "next_attempt",
        "sent",
    )
    list_filter = (
        "status",
        "reason",
        "channel",
        "trigger",
        QueueFilter,
        SinceFilter,
        ("detected_at", admin.DateFieldListFilter),
    )
    list_select_related = ("watch__listing", "device")
    list_per_page = 100
    # Sorting a million rows by an unindexed column is a full sort on every page view.
    sortable_by = ("id", "detected", "next_attempt")
    search_fields = ("=id", "watch__listing__name", "watch__listing__item_code")
    search_help_text = "Outbox id (123 or #123), or part of a listing's name or item code."
    ordering = ("-id",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    # Facet counts are a count per filter choice over the whole table on every page view.
    show_facets = admin.ShowFacets.NEVER
    inlines = [OutboxEventInline]
    actions = ["requeue_rows", "drop_rows", "retry_rows_now"]
    fieldsets = (
        (None, {"fields": ("status", "reason", "detail", "channel", "trigger")}),
        ("Who and what", {"fields": ("watch_link", "listing_link", "device_link")}),
        (
            "When",
            {
                "fields": (
                    "detected_at",
                    "created_at",
                    "updated_at",
                    "next_attempt_at",
                    ("retry_count", "attempts"),
                    ("claimed_at", "claimed_by"),
                    "sent_at",
                )
            },
        ),
        ("Detected, then re-fetched at each attempt", {"fields": ("attempts_side_by_side",)}),
        ("Sent message", {"fields": ("sent_message_pretty",)}),
    )
    readonly_fields = (
        "status",
        "reason",
        "detail",
        "channel",
        "trigger",
        "watch_link",
        "listing_link",
        "device_link",
        "detected_at",
        "created_at",
        "updated_at",
        "next_attempt_at",
        "retry_count",
        "attempts",
        "claimed_at",
        "claimed_by",
        "sent_at",
        "attempts_side_by_side",
        "sent_message_pretty",
    )

    class Media:
        css = {"all": ["outbox/admin.css"]}

    # --- permissions: history is never edited; levers need the change permission ----------

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_operate_permission(self, request) -> bool:
        """Who may pull the levers: staff with the outbox's change permission."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    # --- changelist -----------------------------------------------------------------------

    @admin.display(description="watch", ordering="watch_id")
    def watch_col(self, row: Outbox) -> str:
        return admin_link(row.watch, f"#{row.watch_id}")

    @admin.display(description="listing")
    def listing_col(self, row: Outbox) -> str:
        listing = row.watch.listing
        name = str(listing)
        url = reverse("admin:watches_listing_change", args=[listing.pk])
        return format_html('<a href="{}" title="{}">{}</a>', url, name, Truncator(name).chars(24))

    @admin.display(description="device")
    def device_col(self, row: Outbox) -> str:
        return admin_link(row.device, row.device.short_id)

    @admin.display(description="channel", ordering="channel")
    def channel_col(self, row: Outbox) -> str:
        return row.channel

    @admin.display(description="trigger", ordering="trigger")
    def trigger_col(self, row: Outbox) -> str:
        return row.trigger

    @admin.display(description="retries", ordering="retry_count")
    def retries(self, row: Outbox) -> int:
        return row.retry_count

    @admin.display(description="detected", ordering="detected_at")
    def detected(self, row: Outbox) -> str:
        return _when(row.detected_at)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, row: Outbox) -> str:
        # Only a row still in the queue has a next attempt worth showing.
        return _when(row.next_attempt_at) if row.status in DUE_STATUSES else "—"

    @admin.display(description="sent", ordering="sent_at")
    def sent(self, row: Outbox) -> str:
        return _when(row.sent_at)

    @admin.display(description="status", ordering="status")
    def status_col(self, row: Outbox) -> str:
        return format_html(
            '<span class="ob-badge ob-{}">{}</span>', row.status, row.get_status_display()
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Outbox], search_term: str
    ) -> tuple[QuerySet[Outbox], bool]:
        """Each word must match. `#123` is outbox id 123; a bare number is that id or a
        listing whose item code is exactly that number (JAN-like codes); any other word is
        part of a listing's name or item code. Listings are matched first (a small table),
        then their rows through the watch index — a join from a million outbox rows to match
        a name would read them all."""
        for word in search_term.split():
            number = word.removeprefix("#")
            if word.startswith("#") and number.isdigit():
                queryset = queryset.filter(pk=int(number))
                continue
            if number.isdigit():
                listings = Listing.objects.filter(item_code__iexact=word)
            else:
                listings = Listing.objects.filter(
                    Q(name__icontains=word) | Q(item_code__icontains=word)
                )
            match = Q(watch__in=Watch.objects.filter(listing__in=listings).values("id"))
            if number.isdigit():
                match |= Q(pk=int(number))
            queryset = queryset.filter(match)
        return queryset, False

    def get_urls(self):
        overview = path(
            "overview/",
            self.admin_site.admin_view(self.overview_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_overview",
        )
        return [overview, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        # Lazy: an action's POST redirects without rendering, so it costs no counting.
        extra_context = {**(extra_context or {}), "overview": SimpleLazyObject(self._overview)}
        return super().changelist_view(request, extra_context)

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Outbox overview",
            "opts": self.opts,
            "overview": self._overview(),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/outbox/outbox/overview.html", context)

    def _overview(self) -> Overview:
        changelist_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        return build_overview(outbox_stats(), changelist_url)

    # --- levers ---------------------------------------------------------------------------

    @admin.action(
        description="Requeue: failed or retrying → pending, due now, retries reset",
        permissions=["operate"],
    )
    def requeue_rows(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.requeue(queryset, actor=request.user.get_username()))

    @admin.action(
        description="Drop: pending or retrying → dropped (manual)", permissions=["operate"]
    )
    def drop_rows(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.drop(queryset, actor=request.user.get_username()))

    @admin.action(description="Retry now: retrying → due now", permissions=["operate"])
    def retry_rows_now(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.retry_now(queryset, actor=request.user.get_username()))

    def _report(self, request: HttpRequest, result: levers.LeverResult) -> None:
        level = messages.WARNING if result.skipped_total else messages.SUCCESS
        self.message_user(request, result.message(), level)

    # --- detail page ----------------------------------------------------------------------

    @admin.display(description="watch")
    def watch_link(self, row: Outbox) -> str:
        return admin_link(row.watch, f"#{row.watch_id} {row.watch}")

    @admin.display(description="listing")
    def listing_link(self, row: Outbox) -> str:
        listing = row.watch.listing
        return admin_link(listing, f"{listing} ({listing.source}:{listing.item_code})")

    @admin.display(description="device")
    def device_link(self, row: Outbox) -> str:
        return admin_link(row.device, row.device)

    @admin.display(description="snapshot and attempts")
    def attempts_side_by_side(self, row: Outbox) -> str:
        """The detection snapshot, then what each attempt re-fetched and decided, in columns."""
        columns = [
            (
                "Detected",
                row.detected_at,
                "",
                pretty_json(row.detected_payload),
            )
        ]
        outcomes = row.events.filter(from_status=Status.SENDING).order_by("at", "id")
        for n, event in enumerate(outcomes, start=1):
            outcome = f"→ {event.get_to_status_display()}"
            if event.reason:
                outcome += f" · {event.get_reason_display()}"
            columns.append((f"Attempt {n}", event.at, outcome, pretty_json(event.data)))
        cells = format_html_join(
            "",
            '<div class="ob-attempt"><h4>{} <small>{}</small></h4><p>{}</p><pre class="ob-json">{}'
            "</pre></div>",
            (
                (title, timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S"), outcome, text or "—")
                for title, at, outcome, text in columns
            ),
        )
        return format_html('<div class="ob-attempts">{}</div>', cells)

    @admin.display(description="sent message")
    def sent_message_pretty(self, row: Outbox) -> str:
        if row.sent_message is None:
            return "—"
        return format_html('<pre class="ob-json">{}</pre>', pretty_json(row.sent_message))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Outbox]:
        return super().get_queryset(request).select_related("watch__listing", "device")


@admin.register(DispatchRun)
class DispatchRunAdmin(admin.ModelAdmin):
    list_display = (
        "started_at",
        "duration",
        "holder",
        "claimed",
        "sent",
        "dropped",
        "retry",
        "failed",
        "recovered",
        "error",
    )
    list_filter = (("error", admin.EmptyFieldListFilter), "started_at")
    ordering = ("-started_at",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description="took")
    def duration(self, run: DispatchRun) -> str:
        return f"{(run.finished_at - run.started_at).total_seconds():.1f} s"

    # A log: the retention job prunes it, nobody edits it.
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ListingAdmin(watches_admin.ListingAdmin):
    """The domain's listing admin, plus the pause lever: pausing a listing (by the action or
    by ticking `paused` on its page) drops its pending and retrying notifications at once,
    with the staff user's name on each event. Registered from here because only the outbox
    may know about the outbox (watches never imports it)."""

    actions = [*(watches_admin.ListingAdmin.actions or ()), "pause_listings"]

    @admin.action(
        description="Pause tracking, and drop their pending notifications",
        permissions=["change"],
    )
    def pause_listings(self, request: HttpRequest, queryset: QuerySet[Listing]) -> None:
        paused, result = levers.pause_listings(
            queryset.values_list("id", flat=True), actor=request.user.get_username()
        )
        self.message_user(request, f"{paused} listing(s) paused; notifications: {result.message()}")

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if obj.paused and "paused" in form.changed_data:
            _, result = levers.pause_listings([obj.pk], actor=request.user.get_username())
            if result.done:
                self.message_user(request, f"Listing paused; notifications: {result.message()}")


admin.site.unregister(Listing)
admin.site.register(Listing, ListingAdmin)
