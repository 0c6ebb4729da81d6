"""The outbox changelist: few, narrow columns that fit beside both sidebars at 1280 px, search
that never joins a million rows to match a name, and the staff levers as actions."""

from __future__ import annotations

import datetime as dt
import functools

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from common.ids import typed_id
from outbox.admin.display import choice_label, compact_time
from outbox.admin.filters import (
    ListingFilter,
    MaybeDeliveredFilter,
    QueueFilter,
    QuietHoursFilter,
    SinceFilter,
)
from outbox.admin.overview_page import OverviewMixin
from outbox.admin.row_detail import RowDetailMixin
from outbox.models import DUE_STATUSES, TERMINAL, Outbox, Reason, Status
from outbox.reporting import levers
from outbox.reporting.paginator import CappedCountPaginator
from watches.models import Channel, Listing, Trigger, Watch
from yasugoro.admin_mixins import (
    CheckedActionIdsMixin,
    PlainActionCheckboxMixin,
    ReadOnlyAdminMixin,
)

# Characters of a listing's name shown in the list; the whole name is the tooltip.
NAME_CHARS = 28


@admin.register(Outbox)
class OutboxAdmin(
    CheckedActionIdsMixin,
    PlainActionCheckboxMixin,
    ReadOnlyAdminMixin,
    OverviewMixin,
    RowDetailMixin,
    admin.ModelAdmin,
):
    list_display = (
        "id",
        "listing_col",
        "trigger_col",
        "status_col",
        "reason_col",
        "retries",
        "detected",
        "next_or_done",
    )
    list_filter = (
        "status",
        "reason",
        QueueFilter,
        SinceFilter,
        MaybeDeliveredFilter,
        "channel",
        QuietHoursFilter,
        "trigger",
        ("detected_at", admin.DateFieldListFilter),
        ListingFilter,
    )
    list_select_related = ("watch__listing", "device")
    # 50 rows: a page staff can read, and each row's cells cost more to render than to query.
    list_per_page = 50
    # Only the primary key: any other order over a million rows is a sort of all of them.
    sortable_by = ("id",)
    search_fields = ("=id", "watch__listing__name", "watch__listing__item_code")
    search_help_text = _("Outbox id (123 or #123), or part of a listing's name or item code.")
    ordering = ("-id",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    # Facet counts are a count per filter choice over the whole table on every page view.
    show_facets = admin.ShowFacets.NEVER
    actions = ["requeue_rows", "drop_rows", "retry_rows_now"]

    def has_operate_permission(self, request) -> bool:
        """Who may pull the levers: staff with the outbox's change permission (the pages
        themselves are read-only for everyone)."""
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Outbox]:
        return super().get_queryset(request).select_related("watch__listing", "device")

    # --- columns --------------------------------------------------------------------------

    @admin.display(description=_("listing"))
    def listing_col(self, row: Outbox) -> str:
        listing = row.watch.listing
        name = str(listing)
        title = gettext("%(name)s — watch #%(watch)s, device %(device)s") % {
            "name": name,
            "watch": row.watch_id,
            "device": row.device.short_id,
        }
        short = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"
        return format_html(
            '<a class="ob-name" href="{}" title="{}">{}</a>',
            listing_change_url(listing.pk),
            title,
            short,
        )

    @admin.display(description=_("trigger"))
    def trigger_col(self, row: Outbox) -> str:
        return format_html(
            '<span class="ob-trigger" title="{}">{}</span>',
            choice_label(Channel, row.channel),
            choice_label(Trigger, row.trigger),
        )

    @admin.display(description=_("status"))
    def status_col(self, row: Outbox) -> str:
        return format_html(
            '<span class="ob-badge ob-{}">{}</span>', row.status, choice_label(Status, row.status)
        )

    @admin.display(description=_("reason"))
    def reason_col(self, row: Outbox) -> str:
        if not row.reason:
            return "—"
        return format_html(
            '<span class="ob-reason" title="{}">{}</span>',
            row.reason,
            choice_label(Reason, row.reason),
        )

    @admin.display(description=_("retries"))
    def retries(self, row: Outbox) -> str:
        return _named(gettext("retries"), row.retry_count)

    @admin.display(description=_("detected"))
    def detected(self, row: Outbox) -> str:
        return _named(gettext("detected"), compact_time(row.detected_at))

    @admin.display(description=_("next / done"))
    def next_or_done(self, row: Outbox) -> str:
        """A queued row's next attempt, a row in flight its claim, a finished row when it
        finished: the one time that matters for where the row stands."""
        at: dt.datetime | None
        if row.status in DUE_STATUSES:
            at = row.next_attempt_at
        elif row.status in TERMINAL:
            at = row.sent_at or row.updated_at
        else:
            at = row.claimed_at
        return _named(gettext("next / done"), compact_time(at))

    # --- search ---------------------------------------------------------------------------

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
            # ASCII digits only: `"²".isdigit()` is true too, and `int("²")` raises.
            is_number = number.isascii() and number.isdigit()
            if word.startswith("#") and is_number:
                row_id = typed_id(number)
                queryset = queryset.filter(pk=row_id) if row_id is not None else queryset.none()
                continue
            if is_number:
                listings = Listing.objects.filter(item_code__iexact=word)
            else:
                listings = Listing.objects.filter(
                    Q(name__icontains=word) | Q(item_code__icontains=word)
                )
            match = Q(watch__in=Watch.objects.filter(listing__in=listings).values("id"))
            if is_number and (row_id := typed_id(number)) is not None:
                match |= Q(pk=row_id)
            queryset = queryset.filter(match)
        return queryset, False

    # --- levers ---------------------------------------------------------------------------

    @admin.action(
        description=_("Requeue: failed or retrying → pending, due now, retries reset"),
        permissions=["operate"],
    )
    def requeue_rows(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.requeue(queryset, actor=request.user.get_username()))

    @admin.action(
        description=_("Drop: pending or retrying → dropped (manual)"), permissions=["operate"]
    )
    def drop_rows(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.drop(queryset, actor=request.user.get_username()))

    @admin.action(description=_("Retry now: retrying → due now"), permissions=["operate"])
    def retry_rows_now(self, request: HttpRequest, queryset: QuerySet[Outbox]) -> None:
        self._report(request, levers.retry_now(queryset, actor=request.user.get_username()))

    def _report(self, request: HttpRequest, result: levers.LeverResult) -> None:
        level = messages.WARNING if result.skipped_total else messages.SUCCESS
        self.message_user(request, result.message(), level)


@functools.cache
def _listing_url_parts() -> tuple[str, str]:
    # A URL per row of a page: reverse once, then fill in the id (reverse costs more than
    # the rest of the cell).
    url = reverse("admin:watches_listing_change", args=[987654321])
    head, _, tail = url.partition("987654321")
    return head, tail


def _named(column: str, value: object) -> str:
    """A cell's value with its column's name before it, shown only where the table's header
    is not (a phone shows each row as a card: outbox/static/outbox/admin.css)."""
    return format_html('<span class="ob-cell-name">{} </span>{}', column, value)


def listing_change_url(listing_id: int) -> str:
    head, tail = _listing_url_parts()
    return f"{head}{listing_id}{tail}"


def notifications_link(listing: Listing) -> tuple[str, str]:
    """The listing admin's link to this listing's notifications (registered with
    `watches.admin.add_listing_link`, so watches needs to know nothing of the outbox)."""
    url = reverse("admin:outbox_outbox_changelist")
    return gettext("Notifications"), f"{url}?listing={listing.pk}"
