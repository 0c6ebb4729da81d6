"""django-q2 entry point of the demo tick. Thin: it calls plain functions."""

from __future__ import annotations

import logging

from django.apps import apps

from demo.apps import TICK_SCHEDULE

log = logging.getLogger("demo.tasks")


def demo_tick() -> dict[str, int]:
    """Schedule `demo-tick` (only with DEMO_TICK): look at the demo market, then move it.

    Looking first means every detection meets a market that has moved once more by the time
    the dispatcher re-checks it, as a real one does between a poll and a send: some sales
    will have ended, some items sold out, some points campaigns closed, and the outbox shows
    drops beside sends.

    Where the demo app is no longer installed (DEMO_MARKET switched off after `migrate`
    scheduled the tick), the tick removes its own schedule instead and moves nothing.
    """
    if not apps.is_installed("demo"):
        from yasugoro.schedules import remove_schedule

        remove_schedule(TICK_SCHEDULE)
        log.warning("the demo app is not installed: removed the %s schedule", TICK_SCHEDULE)
        return {"moves": 0}
    # Imported here: the models of an app that is not installed cannot be imported at all.
    from demo.market import tick, tick_campaigns
    from watches.polling.poll import poll

    counts = poll(source="demo", force=True).as_json()
    counts["moves"] = len(tick())
    counts["campaigns"] = len(tick_campaigns())
    return counts
