"""A daily snapshot of the settled part of the outbox, so the overview, `outbox_stats` and
/metrics count a million rows without reading them.

Sent and dropped rows never move again (no transition leaves them), and every transition
writes `updated_at = now`. So the settled rows that existed when the snapshot was taken (id up
to its `last_id`) and last moved before a boundary B can only ever leave that set (deleted by
retention, or with their device), never join it: counted once per day, per service day,
status and reason, they stay counted. Rows written later are always counted live, even with
an old `updated_at` (an import, a restore). Everything else — the
settled rows that moved since B and every row still in the queue or failed (a failed row can
be requeued) — is counted live, from the index, as before.

B is the start of the service day before the snapshot's, so the live part is a day or two of
rows whatever the table's size, and the 1-hour and 24-hour windows lie inside it; a longer
window adds the snapshot's days it covers and counts live only the part of its first day.
Retention takes a new snapshot right after it deletes, so deletions by retention are never
over-counted; rows deleted with a person's data are, until the next daily snapshot.

Why not counters kept by every transition: a transition knows the status a row left but not
the reason, so per-reason counts could not be decremented; and one counter row per status
would serialise every dispatcher's claims on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Count, Max, Sum
from django.utils import timezone

from outbox.expressions import LocalDate
from outbox.models import DEDUP_ZONE, SETTLED, CountSnapshot, CountSnapshotRow, Outbox

# The live part is the snapshot's service day and the one before: at least a whole day, so
# the overview's 1-hour and 24-hour windows never reach into the snapshot.
LIVE_DAYS = 1


def boundary_for(now: dt.datetime) -> dt.datetime:
    """The start of the service day LIVE_DAYS days before `now`'s."""
    zone = zoneinfo.ZoneInfo(DEDUP_ZONE)
    day = now.astimezone(zone).date() - dt.timedelta(days=LIVE_DAYS)
    return dt.datetime.combine(day, dt.time.min, tzinfo=zone)


def refresh_snapshot(
    now: dt.datetime | None = None,
    *,
    outbox=Outbox,
    snapshot=CountSnapshot,
    snapshot_row=CountSnapshotRow,
    using: str = DEFAULT_DB_ALIAS,
) -> int:
    """Count the settled rows that moved before the boundary and replace the snapshot with
    those counts, in one transaction (readers see the old one or the new one, whole).
    Returns the number of rows counted. The model arguments and `using` let a migration
    pass its historical models and the database it migrates."""
    now = now or timezone.now()
    boundary = boundary_for(now)
    last_id = outbox.objects.using(using).aggregate(last=Max("id"))["last"] or 0
    counts = (
        outbox.objects.using(using)
        .filter(status__in=[s.value for s in SETTLED], updated_at__lt=boundary, id__lte=last_id)
        .annotate(day=LocalDate("updated_at", zone=DEDUP_ZONE))
        .order_by()
        .values("day", "status", "reason", "channel")
        .annotate(n=Count("*"))
    )
    rows = [
        (_date(row["day"]), row["status"], row["reason"], row["channel"], row["n"])
        for row in counts
    ]
    with transaction.atomic(using=using):
        snapshot.objects.using(using).all().delete()
        taken = snapshot.objects.using(using).create(
            taken_at=now, boundary=boundary, last_id=last_id
        )
        snapshot_row.objects.using(using).bulk_create(
            (
                snapshot_row(
                    snapshot=taken, day=day, status=status, reason=reason, channel=channel, rows=n
                )
                for day, status, reason, channel, n in rows
            ),
            batch_size=500,
        )
    return sum(n for *_, n in rows)


def usable_snapshot(now: dt.datetime) -> CountSnapshot | None:
    """The latest snapshot, unless a row was written since with a time before its boundary
    (an import, a restore: then only counting everything is right, until the next one)."""
    taken = CountSnapshot.objects.order_by("-taken_at").first()
    if taken is None or taken.boundary > now:
        return None
    # In id order from the snapshot's last id: the rows written since, not the table.
    late = Outbox.objects.filter(id__gt=taken.last_id, updated_at__lt=taken.boundary)
    if late.order_by("id").exists():
        return None
    return taken


def snapshot_totals(taken: CountSnapshot) -> dict[tuple[str, str, str], int]:
    """(status, reason, channel) → rows, over all the snapshot's days."""
    rows = taken.rows.order_by().values_list("status", "reason", "channel").annotate(n=Sum("rows"))
    return {(status, reason, channel): n for status, reason, channel, n in rows}


def snapshot_days(taken: CountSnapshot, since: dt.date) -> dict[tuple[dt.date, str, str, str], int]:
    """(service day, status, reason, channel) → rows, for the snapshot's days from `since`."""
    rows = taken.rows.filter(day__gte=since).values_list(
        "day", "status", "reason", "channel", "rows"
    )
    return {(_date(day), status, reason, channel): n for day, status, reason, channel, n in rows}


def _date(value) -> dt.date:
    # SQLite hands back the date() text as is.
    return dt.date.fromisoformat(value) if isinstance(value, str) else value
