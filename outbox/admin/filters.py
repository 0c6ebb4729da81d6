"""The outbox changelist's own filters: where a row stands in the queue, when its status
changed, whether it may have been delivered unrecorded, quiet hours, and which listing it is
about."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from common.ids import typed_id
from outbox.models import DUE_STATUSES, Reason, Status
from outbox.reporting.overview import WINDOW_LABELS
from outbox.reporting.stats import WINDOWS, due_now, stuck_in_sending
from watches.models import Device, Listing, Watch


class SinceFilter(admin.SimpleListFilter):
    """Rows whose status changed within a window: what the overview's window columns count."""

    title = _("status changed within")
    parameter_name = "since"

    def lookups(self, request, model_admin):
        return [
            (key, WINDOW_LABELS.get(key, key))
            for key, length in WINDOWS.items()
            if length is not None
        ]

    def queryset(self, request, queryset):
        length = WINDOWS.get(self.value() or "")
        if length is None:
            return queryset
        return queryset.filter(updated_at__gte=timezone.now() - length)


class QueueFilter(admin.SimpleListFilter):
    """Where a live row stands in the queue."""

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        return [
            ("due", _("Due now")),
            ("waiting", _("Waiting for a later attempt")),
            ("stuck", _("Stuck in sending (lease expired)")),
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


class MaybeDeliveredFilter(admin.SimpleListFilter):
    """Rows whose lease expired after their delivery had started: the person may have the
    message although the row did not end `sent` (or was sent twice). Read from the
    `outbox_maybe_delivered` partial index."""

    title = _("may have been delivered")
    parameter_name = "maybe_delivered"

    def lookups(self, request, model_admin):
        return [("yes", _("Lease expired mid-delivery"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(maybe_delivered=True)
        return queryset


class ListingFilter(admin.SimpleListFilter):
    """`?listing=<id>`: one listing's notifications, the link the listing admin shows. No
    list of choices (there may be thousands of listings): it appears only when set, named
    after its listing, with "All" to leave it."""

    title = _("listing")
    parameter_name = "listing"

    def lookups(self, request, model_admin):
        # Without a choice the filter would not run at all, and a bad value would list
        # every row instead of none.
        value = self.value()
        if not value:
            return []
        listing_id = typed_id(value)
        listing = None if listing_id is None else Listing.objects.filter(pk=listing_id).first()
        return [(value, str(listing) if listing else f"#{value}")]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        listing_id = typed_id(value)
        if listing_id is None:
            return queryset.none()
        # The listing's watches first (a few), then their rows through the watch index: a
        # join would have the database walk the whole outbox looking for them.
        watches = Watch.objects.filter(listing_id=listing_id).values("id")
        return queryset.filter(watch__in=watches)


class QuietHoursFilter(admin.SimpleListFilter):
    """Quiet hours: rows held now until their device's quiet window ends (from the reason
    index), or every row of devices that keep quiet hours."""

    title = _("quiet hours")
    parameter_name = "quiet_hours"

    def lookups(self, request, model_admin):
        return [
            ("held", _("Held now until the window ends")),
            ("device", _("Devices with quiet hours")),
        ]

    def queryset(self, request, queryset):
        match self.value():
            case "held":
                return queryset.filter(reason=Reason.QUIET_HOURS, status=Status.RETRY)
            case "device":
                # The devices first (few), then their rows through the device index.
                quiet = Device.objects.filter(quiet_start__isnull=False, quiet_end__isnull=False)
                return queryset.filter(device__in=quiet.exclude(quiet_start=F("quiet_end")))
        return queryset
