"""The notification outbox: one row per notification to one device on one channel, and an
append-only log of every transition it went through."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from outbox.expressions import LocalDate, ReadableTime
from watches.models import Channel, Device, Trigger, Watch

# The zone of the dedup day is pinned here and therefore in the migration, never taken from
# settings at migrate time.
DEDUP_ZONE = "Asia/Tokyo"


class Status(models.TextChoices):
    PENDING = "pending", _("Pending")
    SENDING = "sending", _("Sending")
    RETRY = "retry", _("Retrying")
    SENT = "sent", _("Sent")
    DROPPED = "dropped", _("Dropped")
    FAILED = "failed", _("Failed")


TERMINAL = frozenset({Status.SENT, Status.DROPPED, Status.FAILED})
DUE_STATUSES = (Status.PENDING, Status.RETRY)


class Reason(models.TextChoices):
    """The closed vocabulary of why a row moved. Countable, and readable in admin."""

    # dropped: we learned we should not send, so we did not
    WATCH_REMOVED = "watch_removed", _("Watch removed")
    WATCH_PAUSED = "watch_paused", _("Watch paused")
    LISTING_PAUSED = "listing_paused", _("Listing paused")
    NO_SUBSCRIPTION = "no_subscription", _("No push subscription")
    SUBSCRIPTION_GONE = "subscription_gone", _("Push subscription gone")
    NO_EMAIL = "no_email", _("No confirmed e-mail address")
    # the device no longer asks to be told on the row's channel (Device.notify_via changed
    # while the row waited: held for quiet hours, retrying, or simply due)
    CHANNEL_OFF = "channel_off", _("Channel switched off")
    RECIPIENT_REFUSED = "recipient_refused", _("Mail server refused the address")
    OUT_OF_STOCK = "out_of_stock", _("Out of stock")
    ITEM_NOT_FOUND = "item_not_found", _("Item not found")
    CONDITION_LOST = "condition_lost", _("Condition no longer holds")
    # the condition held after points and no longer does only because the shop gives fewer
    # points now (a points campaign ended between detection and sending)
    POINTS_ENDED = "points_ended", _("Points campaign ended")
    ALREADY_NOTIFIED = "already_notified", _("Already notified")
    # a newer detection for the same watch and channel went out instead (a backlog)
    SUPERSEDED = "superseded", _("Superseded by a newer notification")
    MANUAL = "manual", _("Dropped by staff")
    # retry / failed: something transient went wrong
    REFETCH_RATE_LIMITED = "refetch_rate_limited", _("Marketplace rate limit")
    REFETCH_NETWORK = "refetch_network", _("Marketplace unreachable")
    REFETCH_SERVER = "refetch_server", _("Marketplace server error")
    REFETCH_BAD_RESPONSE = "refetch_bad_response", _("Marketplace bad response")
    DELIVER_RATE_LIMITED = "deliver_rate_limited", _("Push service rate limit")
    DELIVER_NETWORK = "deliver_network", _("Push service unreachable")
    DELIVER_SERVER = "deliver_server", _("Push service error")
    LEASE_EXPIRED = "lease_expired", _("Dispatcher lease expired")
    # not started: the re-fetched value it tells was older than OUTBOX_REFETCH_MAX_AGE when
    # its delivery came up (slow re-fetches or deliveries ahead of it in the batch)
    FRESH_VALUE_EXPIRED = "fresh_value_expired", _("Fresh price too old to send")
    # retry, not counted as one: held until the device's quiet hours end
    QUIET_HOURS = "quiet_hours", _("Held for quiet hours")
    # retry, not counted as one: the fleet's shared rate limiter (Redis) could not be asked,
    # so neither was the marketplace (`FetchError.ours`)
    BUDGET_UNAVAILABLE = "budget_unavailable", _("Shared rate limiter unreachable")
    # retry, not counted as one: the marketplace answered a configuration fault and is halted
    # (`watches.marketplaces.halts`); due again when its next probe may go out
    MARKETPLACE_HALTED = "marketplace_halted", _("Held: marketplace needs a configuration fix")
    # failed at once: the push service refused the request itself (our bug, not transient)
    DELIVER_REJECTED = "deliver_rejected", _("Push service rejected the request")
    # pending again / due now: a staff lever
    REQUEUED = "requeued", _("Requeued by staff")
    # sent
    DELIVERED = "delivered", _("Delivered")
    # claimed
    CLAIMED = "claimed", _("Claimed by a dispatcher")


# Settled: no transition leaves these, so a count of them, once taken, only changes when rows
# are deleted (retention, or a device's data deleted with it).
SETTLED = (Status.SENT, Status.DROPPED)


class Outbox(models.Model):
    watch = models.ForeignKey(Watch, on_delete=models.CASCADE, related_name="outbox_rows")
    # Unindexed on its own: outbox_by_device leads with it and serves every lookup by device
    # (a cascade too); a second index would only cost each enqueue.
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, related_name="outbox_rows", db_index=False
    )
    channel = models.CharField(_("channel"), max_length=20, choices=Channel.choices)
    trigger = models.CharField(_("trigger"), max_length=20, choices=Trigger.choices)
    status = models.CharField(
        _("status"), max_length=10, choices=Status.choices, default=Status.PENDING
    )
    # Written by every transition's UPDATE (`previous_status = status`) so the event can
    # record where the row came from.
    previous_status = models.CharField(max_length=10, choices=Status.choices, blank=True)
    reason = models.CharField(_("reason"), max_length=30, choices=Reason.choices, blank=True)
    detail = models.TextField(_("detail"), blank=True)
    detected_at = models.DateTimeField(_("detected at"))
    # The snapshot at detection. Written once by enqueue, never updated.
    detected_payload = models.JSONField(default=dict)
    # What was actually sent (built from the re-fetched value), for history and staff.
    sent_message = models.JSONField(null=True, blank=True)
    retry_count = models.PositiveIntegerField(_("retry count"), default=0)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt at"))
    claimed_at = models.DateTimeField(_("claimed at"), null=True, blank=True)
    claimed_by = models.CharField(_("claimed by"), max_length=64, blank=True)
    # Written (fenced) right before the channel is asked, cleared by the next claim: a lease
    # that expires while it is set may have let the message out unrecorded.
    attempt_started_at = models.DateTimeField(_("attempt started at"), null=True, blank=True)
    # A lease expired after a delivery had started: the person may have the message already.
    # Never cleared; the history page and admin say so.
    maybe_delivered = models.BooleanField(_("may have been delivered"), db_default=False)
    # The digest the row's last started delivery went out in — {"id": its id, "tag": its
    # Topic and tag} — written with the intent, kept by the next claim; null when it went
    # alone. A row that may have been delivered is sent again in the same form, so the
    # device replaces what it showed (docs/decisions/0066-crash-resend-form.md).
    attempt_digest = models.JSONField(_("digest of the attempt"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)

    class Meta:
        verbose_name = _("outbox row")
        verbose_name_plural = _("outbox rows")
        constraints = [
            # Idempotent enqueue: one live row per watch, trigger, service day and channel.
            # Dropped rows do not hold the day's slot.
            models.UniqueConstraint(
                F("watch"),
                F("trigger"),
                LocalDate("detected_at", zone=DEDUP_ZONE),
                F("channel"),
                name="outbox_one_per_watch_trigger_day_channel",
                condition=~Q(status="dropped"),
            ),
            # At most one notification per watch and channel in flight, across every
            # dispatcher: a claim of a second one fails in the database.
            models.UniqueConstraint(
                fields=["watch", "channel"],
                name="outbox_one_in_flight_per_watch_channel",
                condition=Q(status="sending"),
            ),
            # A time the day above reads exactly, whoever writes the row: on SQLite a column
            # takes any text or number, and one the day cannot read would slip past the dedup.
            models.CheckConstraint(
                condition=ReadableTime("detected_at"), name="outbox_detected_at_is_a_time"
            ),
        ]
        indexes = [
            # Dispatcher, step 2: status IN (pending, retry) AND next_attempt_at <= now
            # ORDER BY next_attempt_at, id. Partial, so terminal rows never weigh on it.
            models.Index(
                fields=["next_attempt_at", "id"],
                name="outbox_due",
                condition=Q(status__in=["pending", "retry"]),
            ),
            # Dispatcher, step 1: status = sending AND claimed_at < now - lease. The rows in
            # flight are few (a batch or so per dispatcher): the index finds them all and the
            # lease is checked on each. Keyed by id, not claimed_at, so that the lease's
            # heartbeat (claimed_at, attempt_started_at) writes no indexed column and
            # PostgreSQL can rewrite the row in place (migration 0007).
            models.Index(fields=["id"], name="outbox_sending", condition=Q(status="sending")),
            # Admin overview and retention: counts per status, reason and channel over a time
            # window — the overview names every (status, reason, channel) to seek each run
            # to its time range, and groups in the index's order, with nothing to sort.
            models.Index(
                fields=["status", "reason", "channel", "updated_at"],
                name="outbox_status_reason_channel",
            ),
            # Admin changelist `?reason__exact=…` (newest first) and its capped count: a
            # rare reason among a million rows is found without reading the table.
            models.Index(fields=["reason", "id"], name="outbox_reason"),
            # Admin changelist `?channel__exact=email` (newest first): the few rows of a
            # little-used channel among a million, without reading the table.
            models.Index(fields=["channel", "id"], name="outbox_channel"),
            # Admin filter "may have been delivered": a handful among a million rows.
            models.Index(
                fields=["id"], name="outbox_maybe_delivered", condition=Q(maybe_delivered=True)
            ),
            # History page: one device's rows, newest first.
            models.Index(fields=["device", "-created_at"], name="outbox_by_device"),
        ]

    def __str__(self) -> str:
        # Shown by the admin (breadcrumbs, each row's checkbox label): short, and words-free
        # so it reads the same in every language.
        return f"#{self.pk}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


class OutboxEvent(models.Model):
    """Append-only: every transition of an outbox row, with why and who."""

    # Unindexed on its own: outboxevent_row_time leads with it and serves every lookup by row
    # (a cascade too); a second index would only cost each of the two or more events a
    # delivery writes.
    outbox = models.ForeignKey(
        Outbox, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    from_status = models.CharField(_("from status"), max_length=10, choices=Status.choices)
    to_status = models.CharField(_("to status"), max_length=10, choices=Status.choices)
    reason = models.CharField(_("reason"), max_length=30, choices=Reason.choices, blank=True)
    detail = models.TextField(_("detail"), blank=True)
    # Structured facts of the attempt: the re-fetched value, the message, the HTTP status…
    data = models.JSONField(null=True, blank=True)
    actor = models.CharField(_("actor"), max_length=150, blank=True)
    at = models.DateTimeField(_("at"), default=timezone.now)

    class Meta:
        verbose_name = _("outbox event")
        verbose_name_plural = _("outbox events")
        indexes = [
            # Detail page timeline and retention: one row's events in order.
            models.Index(fields=["outbox", "at"], name="outboxevent_row_time"),
        ]

    def __str__(self) -> str:
        return f"{self.from_status}→{self.to_status} {self.reason}"


class DispatchRun(models.Model):
    """One dispatcher cycle's outcome, so staff can see when it last ran and what it did."""

    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"))
    holder = models.CharField(_("holder"), max_length=64)
    claimed = models.PositiveIntegerField(_("claimed"), default=0)
    sent = models.PositiveIntegerField(_("sent"), default=0)
    dropped = models.PositiveIntegerField(_("dropped"), default=0)
    retry = models.PositiveIntegerField(_("retry"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    recovered = models.PositiveIntegerField(_("recovered"), default=0)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        verbose_name = _("dispatch cycle")
        verbose_name_plural = _("dispatch cycles")
        indexes = [models.Index(fields=["-started_at"], name="dispatchrun_recent")]

    def __str__(self) -> str:
        return f"dispatch {self.started_at:%Y-%m-%d %H:%M:%S}"


class CountSnapshot(models.Model):
    """The counts of settled rows (sent, dropped) that last moved before `boundary`, per
    service day, status, reason and channel: what the overview would otherwise re-count
    from a million rows on every view. Taken daily
    (`outbox.reporting.summary.refresh_snapshot`); only the latest is kept."""

    taken_at = models.DateTimeField()
    # Settled rows with updated_at < boundary and id <= last_id are in the snapshot; the
    # others are counted live (a row written later with an old time — an import, a
    # restore — is never taken as counted).
    boundary = models.DateTimeField()
    last_id = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = _("count snapshot")
        verbose_name_plural = _("count snapshots")

    def __str__(self) -> str:
        return f"snapshot before {self.boundary:%Y-%m-%d %H:%M}"


class CountSnapshotRow(models.Model):
    # Unindexed on its own: the unique key leads with it.
    snapshot = models.ForeignKey(
        CountSnapshot, on_delete=models.CASCADE, related_name="rows", db_index=False
    )
    day = models.DateField()  # the service day (Asia/Tokyo) of updated_at
    status = models.CharField(max_length=10, choices=Status.choices)
    reason = models.CharField(max_length=30, blank=True)
    channel = models.CharField(max_length=20, blank=True)
    rows = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["snapshot", "day", "status", "reason", "channel"],
                name="countsnapshotrow_key_channel",
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.status} {self.reason}: {self.rows}"
