"""Staff's view of the outbox: the overview (counts and reasons at a glance), a changelist
that stays fast on a million rows, the story of every notification, and safe levers.

The admin adds no logic of its own: numbers come from `outbox.reporting.stats`, their
arrangement from `outbox.reporting.overview`, and every lever is a function of
`outbox.reporting.levers` that moves rows through the state machine. Nothing here writes
an outbox row with `save()`.

- `changelist` — the Outbox admin: columns, search, levers;
- `filters` — queue, window and listing filters;
- `overview_page` — the overview page and the changelist's panel;
- `row_detail` — the detail page and its timeline;
- `dispatch_runs` — the dispatcher's log;
- `display` — JSON, links and times as staff read them.

The listing admin belongs to `watches`; the outbox only adds a link to each listing's
notifications through the hook `watches.admin.add_listing_link`.
"""

from outbox.admin.changelist import OutboxAdmin, notifications_link
from outbox.admin.dispatch_runs import DispatchRunAdmin
from watches.admin import add_listing_link

add_listing_link(notifications_link)

__all__ = ["DispatchRunAdmin", "OutboxAdmin"]
