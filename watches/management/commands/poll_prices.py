"""`manage.py poll_prices [--listing CODE]… [--force] [--json]`: one price-polling run by hand
(products due, then listings due; with `--listing`, those listings alone)."""

from __future__ import annotations

import json
import math

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from watches.models import Listing
from watches.polling.poll import PollResult, next_due_at, poll
from watches.products.polling import poll_products

# Below this many listings a run is over before a progress line would help.
_PROGRESS_FROM = 100


class Command(BaseCommand):
    help = "Poll the listings due for polling (or the given ones) and enqueue what fires."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--listing",
            action="append",
            dest="codes",
            metavar="CODE",
            help="poll this item code now, due or not (repeatable)",
        )
        parser.add_argument(
            "--force", action="store_true", help="poll every active listing now, due or not"
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print exactly one JSON object"
        )

    def handle(self, *args, codes: list[str] | None, force: bool, as_json: bool, **options) -> None:
        if codes:
            known = set(
                Listing.objects.filter(item_code__in=codes).values_list("item_code", flat=True)
            )
            unknown = [code for code in codes if code not in known]
            if unknown:
                raise CommandError(f"no listing with item code {', '.join(unknown)}")
        show_progress = not as_json and self.stdout.isatty()
        # Products first (every shop's offer in one request each): the offers they observe
        # are then not due for listing polling. Asked for listings by code: those alone.
        result = PollResult() if codes else poll_products(force=force, planned=True)
        result.add(
            poll(
                codes=codes,
                force=force,
                progress=self._progress if show_progress else None,
                skip=result.asked,  # each listing is asked once, with `--force` too
            )
        )
        if show_progress and result.listings >= _PROGRESS_FROM:
            self.stdout.write("")
        counts = result.as_json()
        if as_json:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(" ".join(f"{key}={value}" for key, value in counts.items()))
            if not result.listings and not codes and not force:
                self.stdout.write(nothing_due_hint())

    def _progress(self, done: int, total: int) -> None:
        if total >= _PROGRESS_FROM:
            self.stdout.write(f"\rpolled {done:,}/{total:,} listings", ending="")
            self.stdout.flush()


def nothing_due_hint() -> str:
    """Why a run polled nothing, and what to do about it."""
    due_at = next_due_at()
    if due_at is None:
        return "0 listings due: no listing is being tracked (add one from the home page)."
    minutes = max(1, math.ceil((due_at - timezone.now()).total_seconds() / 60))
    return (
        f"0 listings due: each was polled in the last {settings.POLL_MINUTES / 2:g} min. "
        f"The next is due in {minutes} min ({timezone.localtime(due_at):%H:%M}); "
        "`poll_prices --force` polls them all now."
    )
