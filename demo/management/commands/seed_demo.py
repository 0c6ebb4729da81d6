"""`manage.py seed_demo`: load the demo catalogue and history (idempotent)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from demo.seed import seed_demo


class Command(BaseCommand):
    help = "Load realistic demo consumables with 90 days of price history (idempotent)."

    def handle(self, *args, **options) -> None:
        created = seed_demo()
        self.stdout.write("seeded: " + ", ".join(f"{k}={v}" for k, v in created.items()))
