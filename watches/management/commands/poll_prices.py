"""`manage.py poll_prices [--listing CODE]… [--json]`: one price-polling run by hand."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from watches.models import Listing
from watches.polling import poll

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
            "--json", action="store_true", dest="as_json", help="print exactly one JSON object"
        )

    def handle(self, *args, codes: list[str] | None, as_json: bool, **options) -> None:
        if codes:
            known = set(
                Listing.objects.filter(item_code__in=codes).values_list("item_code", flat=True)
            )
            unknown = [code for code in codes if code not in known]
            if unknown:
                raise CommandError(f"no listing with item code {', '.join(unknown)}")
        show_progress = not as_json and self.stdout.isatty()
        result = poll(codes=codes, progress=self._progress if show_progress else None)
        if show_progress and result.listings >= _PROGRESS_FROM:
            self.stdout.write("")
        counts = result.as_json()
        if as_json:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(" ".join(f"{key}={value}" for key, value in counts.items()))

    def _progress(self, done: int, total: int) -> None:
        if total >= _PROGRESS_FROM:
            self.stdout.write(f"\rpolled {done:,}/{total:,} listings", ending="")
            self.stdout.flush()
