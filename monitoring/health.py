"""Health for load balancers, systemd and people: is the process up, and is the service
ready — database reachable, a dispatch cycle recently, the queue not lagging — and is any
marketplace halted for a configuration fault (said, in words, without making the service
unready: the pages still serve, and pulling every web host would help nobody)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

# Checks that say the service is degraded, never unready: a halted marketplace stops its
# polling and holds its notifications, while every page and the other marketplaces work.
ADVISORY = frozenset({"marketplaces"})


@dataclass
class Readiness:
    """Each check's outcome: `{"ok": bool, …facts}`; ready when every check but the ADVISORY
    ones is ok, degraded when one of those is not."""

    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(check["ok"] for name, check in self.checks.items() if name not in ADVISORY)

    @property
    def degraded(self) -> bool:
        return not all(check["ok"] for name, check in self.checks.items() if name in ADVISORY)

    def as_json(self) -> dict[str, Any]:
        status = "unavailable" if not self.ready else "degraded" if self.degraded else "ok"
        return {"status": status, "checks": self.checks}


def readiness(now: dt.datetime | None = None) -> Readiness:
    """1. the database answers `SELECT 1`; 2. the last dispatch cycle started at most
    READYZ_MAX_CYCLE_AGE_SECONDS ago (3 minutes: the dispatcher runs every minute); 3. the
    queue lag is at most READYZ_MAX_QUEUE_LAG_SECONDS; and, advisory, 4. no marketplace is
    halted for a configuration fault (each halt with its reason in words and the settings to
    fix). Without a database the others are reported as not checked (and not ok)."""
    from outbox.models import DispatchRun
    from outbox.reporting.stats import lag_seconds, oldest_due_at
    from watches.marketplaces import halts

    now = now or timezone.now()
    result = Readiness()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        result.checks["database"] = {"ok": False, "error": type(exc).__name__}
        for name in ("dispatcher", "queue_lag", "marketplaces"):
            result.checks[name] = {"ok": False, "error": "database unreachable"}
        return result
    result.checks["database"] = {"ok": True}

    limit = settings.READYZ_MAX_CYCLE_AGE_SECONDS
    last = DispatchRun.objects.order_by("-started_at").values_list("started_at", flat=True).first()
    age = None if last is None else max(0, int((now - last).total_seconds()))
    result.checks["dispatcher"] = {
        "ok": age is not None and age <= limit,
        "last_cycle_age_seconds": age,
        "limit_seconds": limit,
    }
    lag = lag_seconds(now, oldest_due_at(now))
    lag_limit = settings.READYZ_MAX_QUEUE_LAG_SECONDS
    result.checks["queue_lag"] = {
        "ok": lag <= lag_limit,
        "seconds": lag,
        "limit_seconds": lag_limit,
    }
    halted = [
        {
            "source": halt.source,
            "reason": halt.detail,
            # Empty when what to fix is the registration on the marketplace's site.
            "settings": halts.settings_named(halt.detail),
            "since": halt.since.isoformat(),
            "next_probe_at": halt.probe_after.isoformat(),
        }
        for halt in halts.current()
    ]
    result.checks["marketplaces"] = {"ok": not halted, "halted": halted}
    return result
