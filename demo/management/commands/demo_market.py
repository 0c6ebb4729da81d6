"""`manage.py demo_market list | set CODE [--price N] [--in-stock|--out-of-stock]
[--fault KIND|none] | tick [--times N] [--seed N]`: look at and move the demo world by hand."""

from __future__ import annotations

import datetime as dt
import random

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from demo.market import set_product, tick, tick_campaigns
from demo.models import DemoProduct

# `--fault none` lifts a fault (the stored value is empty).
FAULTS = {"none": "", **{value: value for value in DemoProduct.Fault.values if value}}


def product_line(product: DemoProduct, now: dt.datetime) -> str:
    """One product as `list` shows it: code, price, stock, what is unusual about it (a
    simulated fault, a price held after a change by hand), name."""
    stock = "in stock" if product.in_stock else "OUT OF STOCK"
    notes = []
    if product.fault:
        notes.append(f"fault={product.fault}")
    if product.held_until and product.held_until > now:
        notes.append(f"held until {timezone.localtime(product.held_until):%H:%M}")
    if product.point_rate > 1 and product.points_until:
        until = timezone.localtime(product.points_until)
        notes.append(f"points x{product.point_rate} until {until:%m-%d %H:%M}")
    return (
        f"{product.item_code:<24} ¥{product.price:>7,}  {stock:<12}  "
        f"{', '.join(notes) or '-':<32}  {product.name}"
    )


class Command(BaseCommand):
    help = "List, change or move (one random-walk tick) the demo marketplace's products."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser(
            "list", help="show every demo product, its simulated fault and any hand-set hold"
        )
        setter = sub.add_parser("set", help="change one product's price, stock or simulated fault")
        setter.add_argument("code")
        setter.add_argument("--price", type=int)
        stock = setter.add_mutually_exclusive_group()
        stock.add_argument("--in-stock", dest="in_stock", action="store_true", default=None)
        stock.add_argument("--out-of-stock", dest="in_stock", action="store_false")
        setter.add_argument(
            "--fault",
            choices=list(FAULTS),
            help="make the marketplace answer with this error for the product (none: normally)",
        )
        ticker = sub.add_parser(
            "tick", help="move the market: sales, stock-outs, recoveries, points campaigns"
        )
        ticker.add_argument("--times", type=int, default=1, help="how many ticks (default 1)")
        ticker.add_argument("--seed", type=int, default=None, help="repeatable randomness")

    def handle(self, *args, action: str, **options) -> None:
        if action == "list":
            now = timezone.now()
            for product in DemoProduct.objects.order_by("item_code"):
                self.stdout.write(product_line(product, now))
            return
        if action == "tick":
            if options["times"] < 1:
                raise CommandError("--times must be at least 1")
            rng = random.Random(options["seed"])
            for _ in range(options["times"]):
                for move in tick(rng):
                    stock = "" if move.in_stock else " (out of stock)"
                    self.stdout.write(
                        f"{move.code:<28} {move.what:<10} "
                        f"¥{move.old_price:,} → ¥{move.new_price:,}{stock}"
                    )
                for change in tick_campaigns(rng):
                    window = (
                        f"points x{change.rate} {timezone.localtime(change.start):%m-%d %H:%M}"
                        f" → {timezone.localtime(change.end):%m-%d %H:%M}"
                        if change.start and change.end
                        else "points → x1"
                    )
                    self.stdout.write(f"{change.code:<28} {change.what:<10} {window}")
            return
        fault = options["fault"]
        try:
            product = set_product(
                options["code"],
                price=options["price"],
                in_stock=options["in_stock"],
                fault=None if fault is None else FAULTS[fault],
            )
        except (LookupError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        now = timezone.now()
        self.stdout.write(product_line(product, now))
        if product.held_until and product.held_until > now:
            self.stdout.write(
                "The demo tick leaves it as set until "
                f"{timezone.localtime(product.held_until):%H:%M} (DEMO_HOLD_MINUTES)."
            )
