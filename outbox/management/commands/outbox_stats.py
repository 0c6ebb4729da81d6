"""`manage.py outbox_stats [--since 24h] [--json]`: the admin overview's counts, in a terminal.

`--json` prints exactly one JSON object:
`{"status": {...}, "reasons": {"dropped": {...}, "retry": {...}, "failed": {...}},
"lag_seconds": n, "stuck": n}` — counts of rows whose status last changed within the window
(default: all time); lag and stuck are always as of now.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone, translation

from outbox.reporting.overview import short_duration
from outbox.reporting.stats import ALL_TIME, outbox_stats, parse_since


class Command(BaseCommand):
    help = "Print the outbox's counts per status and per reason, queue lag and stuck rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            default=ALL_TIME,
            help="count rows whose status changed within this window: 30m, 1h, 24h, 7d… or all "
            "(default)",
        )
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print exactly one JSON object"
        )

    def handle(self, *args, since: str, as_json: bool, **options) -> None:
        # A terminal's report, in the one language of the rest of its lines.
        with translation.override("en"):
            self._handle(since, as_json)

    def _handle(self, since: str, as_json: bool) -> None:
        try:
            window = parse_since(since)
        except ValueError as exc:
            raise CommandError(f"--since: {exc}") from None
        name = ALL_TIME if window is None else since.strip().lower()
        stats = outbox_stats(windows={name: window}, chart_days=0)
        data = stats.as_json(name)
        if as_json:
            self.stdout.write(json.dumps(data))
            return
        self._print(data, name, stats)

    def _print(self, data: dict, window: str, stats) -> None:
        title = "all time" if window == ALL_TIME else f"status changed in the last {window}"
        at = timezone.localtime(stats.now)
        self.stdout.write(f"Outbox at {at:%Y-%m-%d %H:%M:%S %Z} ({title})")
        width = max(len(status) for status in data["status"])
        for status, count in data["status"].items():
            self.stdout.write(f"  {status:<{width}}  {count:>9,}")
            for reason, n in data["reasons"].get(status, {}).items():
                self.stdout.write(f"  {'':<{width}}    {n:>9,}  {reason or '(no reason)'}")
        lag = data["lag_seconds"]
        self.stdout.write(f"queue lag: {lag} s ({short_duration(lag)}, the oldest due row)")
        self.stdout.write(f"stuck in sending past the lease: {data['stuck']}")
        run = stats.last_run
        if run is None:
            self.stdout.write("last dispatch cycle: never")
        else:
            outcome = run.error or (
                f"claimed {run.claimed}, sent {run.sent}, dropped {run.dropped}, "
                f"retry {run.retry}, failed {run.failed}, recovered {run.recovered}"
            )
            self.stdout.write(
                f"last dispatch cycle: {timezone.localtime(run.started_at):%Y-%m-%d %H:%M:%S} "
                f"— {outcome}"
            )
