"""The row detail page: who and what, when, the detection snapshot beside what each attempt
re-fetched and decided, the message that went out, and the timeline of every transition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from outbox.admin.display import admin_link, full_time, json_block, pretty_json
from outbox.digests import first_row, recorded
from outbox.models import Outbox, OutboxEvent, Status
from watches.points import Breakdown, as_facts
from yasugoro.admin_mixins import ReadOnlyAdminMixin

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Outbox]  # what the mixin is mixed into (generic in the stubs)
else:
    _ModelAdmin = object


class OutboxEventInline(ReadOnlyAdminMixin, admin.TabularInline):
    """The row's story: every transition, oldest first. Append-only, so read-only."""

    model = OutboxEvent
    template = "admin/outbox/outbox/timeline.html"
    extra = 0
    can_delete = False
    verbose_name = _("event")
    verbose_name_plural = _("timeline")
    fields = ("when", "from_status", "to_status", "reason", "detail", "actor", "data_pretty")
    readonly_fields = fields
    ordering = ("at", "id")

    @admin.display(description=_("at"))
    def when(self, event: OutboxEvent) -> str:
        return full_time(event.at)

    @admin.display(description=_("data"))
    def data_pretty(self, event: OutboxEvent) -> str:
        return "" if event.data is None else json_block(event.data)


class RowDetailMixin(_ModelAdmin):
    """For the Outbox ModelAdmin: the detail page's layout and fields."""

    inlines = [OutboxEventInline]
    fieldsets = (
        (None, {"fields": ("status", "reason", "detail", "channel", "trigger")}),
        (_("Who and what"), {"fields": ("watch_link", "listing_link", "device_link")}),
        (
            _("When"),
            {
                "fields": (
                    "detected_at",
                    "created_at",
                    "updated_at",
                    "next_attempt_at",
                    ("retry_count", "attempts"),
                    ("claimed_at", "claimed_by"),
                    "sent_at",
                    "attempt_started_at",
                    "maybe_delivered",
                )
            },
        ),
        (_("Detected, then re-fetched at each attempt"), {"fields": ("attempts_side_by_side",)}),
        (_("Sent message"), {"fields": ("digest_link", "sent_message_pretty")}),
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
        "attempt_started_at",
        "maybe_delivered",
        "attempts_side_by_side",
        "digest_link",
        "sent_message_pretty",
    )

    @admin.display(description=_("watch"))
    def watch_link(self, row: Outbox) -> str:
        return admin_link(row.watch, f"#{row.watch_id} {row.watch.get_trigger_display()}")

    @admin.display(description=_("listing"))
    def listing_link(self, row: Outbox) -> str:
        listing = row.watch.listing
        return admin_link(listing, f"{listing} ({listing.source}:{listing.item_code})")

    @admin.display(description=_("device"))
    def device_link(self, row: Outbox) -> str:
        return admin_link(row.device, gettext("device %(id)s") % {"id": row.device.short_id})

    @admin.display(description=_("snapshot and attempts"))
    def attempts_side_by_side(self, row: Outbox) -> str:
        """The detection snapshot, then what each attempt re-fetched and decided, in columns;
        each with the price's breakdown (price, shipping, points) it saw."""
        payload = row.detected_payload
        columns = [
            (
                gettext("Detected"),
                row.detected_at,
                "",
                _breakdown(payload, payload),
                pretty_json(payload),
            )
        ]
        outcomes = row.events.filter(from_status=Status.SENDING).order_by("at", "id")
        for n, event in enumerate(outcomes, start=1):
            outcome = f"→ {event.get_to_status_display()}"
            if event.reason:
                outcome += f" · {event.get_reason_display()}"
            title = gettext("Attempt %(n)s") % {"n": n}
            fresh = event.data.get("fresh") if isinstance(event.data, dict) else None
            columns.append(
                (title, event.at, outcome, _breakdown(fresh, payload), pretty_json(event.data))
            )
        cells = format_html_join(
            "",
            '<div class="ob-attempt"><h4>{} <small>{}</small></h4><p>{}</p>'
            '<p class="ob-breakdown">{}</p><pre class="ob-json">{}</pre></div>',
            (
                (title, full_time(at), outcome, words, text or "—")
                for title, at, outcome, words, text in columns
            ),
        )
        return format_html('<div class="ob-attempts">{}</div>', cells)

    @admin.display(description=_("sent message"))
    def sent_message_pretty(self, row: Outbox) -> str:
        return "—" if row.sent_message is None else json_block(row.sent_message)

    @admin.display(description=_("digest"))
    def digest_link(self, row: Outbox) -> str:
        """The digest the row last went out (or was tried) in: its id and every row in it,
        each linked; a dash when the row was sent alone."""
        facts = _digest_facts(row)
        if facts is None:
            return "—"
        rows = facts.get("rows") or _digest_rows(facts["id"])
        links = format_html_join(
            " ",
            '<a href="{}">#{}</a>',
            ((reverse("admin:outbox_outbox_change", args=[pk]), pk) for pk in rows),
        )
        size = gettext("%(n)s rows") % {"n": facts.get("size", len(rows))}
        return format_html("<code>{}</code> · {}: {}", facts["id"], size, links)


def _breakdown(facts: object, payload: object) -> str:
    """The price's breakdown in a snapshot's or a re-fetch's facts ("¥1,980 − 90 pt (5×,
    until 3/19 13:59) = ¥1,890, free shipping"), with what the watch compared; "—" without
    a price."""
    read = as_facts(facts)
    if read is None:
        return "—"
    after = isinstance(payload, dict) and payload.get("after_points") is True
    compared = gettext("judged after points") if after else gettext("judged incl. shipping")
    return f"{Breakdown.of(read).text()} ({compared})"


def _digest_facts(row: Outbox) -> dict | None:
    """What the row's last attempt recorded of its digest (`outbox.digests.membership`)."""
    facts = recorded(row.sent_message)
    if facts is not None:
        return facts
    for data in (
        row.events.filter(from_status=Status.SENDING)
        .order_by("-at", "-id")
        .values_list("data", flat=True)
    ):
        if (facts := recorded(data)) is not None:
            return facts
    return None


def _digest_rows(digest: str) -> list[int]:
    """Every row of `digest`, as its first row (named in the id) recorded them."""
    first = first_row(digest)
    if first is None:
        return []
    events = OutboxEvent.objects.filter(outbox_id=first, from_status=Status.SENDING)
    for data in events.values_list("data", flat=True):
        facts = recorded(data)
        if facts is not None and facts.get("id") == digest and facts.get("rows"):
            return facts["rows"]
    return [first]
