"""The demo catalogue in admin: a price or stock changed there is held from the demo tick,
like one set with `demo_market set`; staff who set or clear the hold themselves keep it."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import time_machine

from demo.models import DemoProduct
from tests.factories import DemoProductFactory

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 1, 10, 0, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))
CHANGELIST = "/admin/demo/demoproduct/"


@pytest.fixture(autouse=True)
def clock(settings):
    settings.DEMO_HOLD_MINUTES = 30
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def change_form_data(admin_client, product: DemoProduct, **changes) -> dict:
    """The change form as admin renders it, with `changes` typed in."""
    form = admin_client.get(f"{CHANGELIST}{product.pk}/change/").context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if value is None:
            value = ""
        elif isinstance(value, dt.datetime):
            local = value.astimezone(zoneinfo.ZoneInfo("Asia/Tokyo"))
            data[f"{name}_0"], data[f"{name}_1"] = f"{local:%Y-%m-%d}", f"{local:%H:%M:%S}"
            continue
        elif field.__class__.__name__ == "SplitDateTimeField":
            data[f"{name}_0"] = data[f"{name}_1"] = ""
            continue
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        data[name] = value
    data.update(changes)
    return data


def test_a_price_changed_on_the_change_form_is_held(admin_client):
    product = DemoProductFactory(item_code="tp-a", price=598)
    response = admin_client.post(
        f"{CHANGELIST}{product.pk}/change/", change_form_data(admin_client, product, price=520)
    )
    assert response.status_code == 302
    product.refresh_from_db()
    assert (product.price, product.held_until) == (520, NOW + dt.timedelta(minutes=30))


def test_a_name_changed_on_the_change_form_holds_nothing(admin_client):
    product = DemoProductFactory(item_code="tp-a", price=598)
    admin_client.post(
        f"{CHANGELIST}{product.pk}/change/", change_form_data(admin_client, product, name="新")
    )
    product.refresh_from_db()
    assert (product.name, product.held_until) == ("新", None)


def test_staff_who_clear_the_hold_while_changing_the_price_keep_it_cleared(admin_client):
    product = DemoProductFactory(item_code="tp-a", price=598, held_until=NOW)
    data = change_form_data(admin_client, product, price=500, held_until_0="", held_until_1="")
    admin_client.post(f"{CHANGELIST}{product.pk}/change/", data)
    product.refresh_from_db()
    assert (product.price, product.held_until) == (500, None)


def test_stock_changed_in_the_changelist_is_held_and_the_untouched_rows_are_not(admin_client):
    first = DemoProductFactory(item_code="tp-a", price=598)
    second = DemoProductFactory(item_code="tp-b", price=1180)
    # The changelist's editable columns, as the browser posts them (ordered by -pk).
    rows = [second, first]
    data = {
        "form-TOTAL_FORMS": "2",
        "form-INITIAL_FORMS": "2",
        "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    for index, product in enumerate(rows):
        data[f"form-{index}-id"] = str(product.pk)
        data[f"form-{index}-price"] = str(product.price)
        data[f"form-{index}-fault"] = ""
        if product is second:
            data[f"form-{index}-in_stock"] = "on"
    # `first` loses its in_stock checkbox: out of stock.
    response = admin_client.post(CHANGELIST, data)
    assert response.status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.in_stock, first.held_until) == (False, NOW + dt.timedelta(minutes=30))
    assert (second.in_stock, second.held_until) == (True, None)


def test_japanese_admin_names_the_demo_catalogue_in_japanese(admin_client):
    DemoProductFactory()
    index = admin_client.get("/admin/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "デモ商品" in index and "Demo products" not in index
    changelist = admin_client.get(CHANGELIST, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "擬似障害" in changelist and "商品コード" in changelist
