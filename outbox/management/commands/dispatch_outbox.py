"""`manage.py dispatch_outbox [--limit N] [--json]`: run one dispatcher cycle by hand."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox.dispatch import run_cycle


class Command(BaseCommand):
    help = "Run one outbox dispatch cycle and print the outcome counts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="claim at most N due rows")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print exactly one JSON object"
        )

    def handle(self, *args, limit: int | None, as_json: bool, **options) -> None:
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        counts = run_cycle(limit=limit).as_json()
        if as_json:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(" ".join(f"{key}={value}" for key, value in counts.items()))
