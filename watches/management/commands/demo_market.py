"""`manage.py demo_market list | set CODE [--price N] [--in-stock|--out-of-stock] |
tick [--times N] [--seed N]`: look at and move the demo world by hand."""

from __future__ import annotations

import random

from django.core.management.base import BaseCommand, CommandError, CommandParser

from watches.demo import set_product, tick
from watches.models import DemoProduct


class Command(BaseCommand):
    help = "List, change or move (one random-walk tick) the demo marketplace's products."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="show every demo product")
        setter = sub.add_parser("set", help="change one product's price or stock")
        setter.add_argument("code")
        setter.add_argument("--price", type=int)
        stock = setter.add_mutually_exclusive_group()
        stock.add_argument("--in-stock", dest="in_stock", action="store_true", default=None)
        stock.add_argument("--out-of-stock", dest="in_stock", action="store_false")
        ticker = sub.add_parser("tick", help="move the market: sales, stock-outs, recoveries")
        ticker.add_argument("--times", type=int, default=1, help="how many ticks (default 1)")
        ticker.add_argument("--seed", type=int, default=None, help="repeatable randomness")

    def handle(self, *args, action: str, **options) -> None:
        if action == "list":
            for product in DemoProduct.objects.order_by("item_code"):
                stock = "in stock" if product.in_stock else "OUT OF STOCK"
                self.stdout.write(
                    f"{product.item_code:<28} ¥{product.price:>7,}  {stock:<12} {product.name}"
                )
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
            return
        try:
            product = set_product(
                options["code"], price=options["price"], in_stock=options["in_stock"]
            )
        except (LookupError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        stock = "in stock" if product.in_stock else "out of stock"
        self.stdout.write(f"{product.item_code}: ¥{product.price:,}, {stock}")
