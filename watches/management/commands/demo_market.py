"""`manage.py demo_market list | set CODE [--price N] [--in-stock|--out-of-stock]`: move the
demo world by hand."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from watches.demo import set_product
from watches.models import DemoProduct


class Command(BaseCommand):
    help = "List or change the demo marketplace's products."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="show every demo product")
        setter = sub.add_parser("set", help="change one product's price or stock")
        setter.add_argument("code")
        setter.add_argument("--price", type=int)
        stock = setter.add_mutually_exclusive_group()
        stock.add_argument("--in-stock", dest="in_stock", action="store_true", default=None)
        stock.add_argument("--out-of-stock", dest="in_stock", action="store_false")

    def handle(self, *args, action: str, **options) -> None:
        if action == "list":
            for product in DemoProduct.objects.order_by("item_code"):
                stock = "in stock" if product.in_stock else "OUT OF STOCK"
                self.stdout.write(
                    f"{product.item_code:<28} ¥{product.price:>7,}  {stock:<12} {product.name}"
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
