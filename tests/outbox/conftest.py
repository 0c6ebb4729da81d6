"""Fixtures the outbox's product-watch tests share."""

from __future__ import annotations

import pytest
import time_machine

from tests.watches.test_products import JAN, START, five_shops
from watches.models import Product
from watches.products.intake import add_product


@pytest.fixture
def product(yahoo) -> Product:
    """A product added by its JAN code at START, its five Yahoo shops' offers at ¥620, ¥520,
    ¥550, ¥505 and ¥700 (free shipping, 1 % back each); nothing asked of Yahoo since."""
    five_shops(yahoo)
    with time_machine.travel(START, tick=False):
        made = add_product(JAN)
    yahoo.requests.clear()
    return made
