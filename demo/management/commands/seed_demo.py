"""`manage.py seed_demo`: load the demo catalogue and history (idempotent)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from demo.seed import seed_demo


class Command(BaseCommand):
    help = (
        "Load realistic demo consumables with 90 days of price history (idempotent). Prints "
        "what it created: listings (one per shop's item), products (JAN codes several shops "
        "sell), demo_items (the demo marketplace's catalogue), price_points, watches."
    )

    def handle(self, *args, **options) -> None:
        created = seed_demo()
        counts = ", ".join(f"{key}={value}" for key, value in created.items())
        already = "" if any(created.values()) else " (already loaded: nothing new)"
        self.stdout.write(f"seeded: {counts}{already}")
