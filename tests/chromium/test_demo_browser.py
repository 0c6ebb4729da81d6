"""The demo catalogue in a real browser, as README invites anyone to use it: staff change a
price in the changelist, the demo tick leaves it alone, and `demo_market list` says so.
Debian's chromium through Playwright, against the live server."""

from __future__ import annotations

import io
import random

from django.core.management import call_command

from demo.market import tick
from demo.models import DemoProduct
from demo.seed import seed_demo
from tests.browser import ARTIFACTS, BROWSER_MARKS

pytestmark = BROWSER_MARKS


def test_a_price_changed_in_the_admin_changelist_is_kept_by_the_tick(staff_page, live_server):
    seed_demo()
    page = staff_page
    page.click("text=Demo products")
    page.wait_for_url("**/admin/demo/demoproduct/")
    # Exactly this item: the demo's other shops sell it as tp-scottie-12r-s2…
    code = page.get_by_text("tp-scottie-12r", exact=True)
    row = page.locator("#result_list tbody tr").filter(has=code)
    row.locator("input[name$='-price']").fill("333")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "demo-products-changelist.png"))

    product = DemoProduct.objects.get(item_code="tp-scottie-12r")
    assert product.price == 333 and product.held_until is not None
    rng = random.Random(5)
    for _ in range(50):
        tick(rng)
    assert DemoProduct.objects.get(item_code="tp-scottie-12r").price == 333
    out = io.StringIO()
    call_command("demo_market", "list", stdout=out)
    (line,) = [line for line in out.getvalue().splitlines() if "tp-scottie-12r " in line]
    assert "¥    333" in line and "held until" in line
