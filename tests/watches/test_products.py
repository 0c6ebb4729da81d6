"""Products against the fake Yahoo! Shopping on 127.0.0.1: intake by JAN code, by a Yahoo
item link and from a listing whose JAN is known; product polling (one request per product per
run) keeps every shop's offer by the observation rule and judges product watches on the best
offer, enqueuing through the outbox as listing watches do."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine

from outbox.models import Outbox
from tests.factories import DeviceFactory, ListingFactory, SubscribedDeviceFactory
from watches.intake import IntakeError, parse_item_ref
from watches.models import Listing, PricePoint, Product, Trigger, Watch
from watches.pages.watchlist import WatchParams
from watches.products.intake import add_by_link, add_product, parse_jan, product_from_listing
from watches.products.polling import poll_products
from watches.products.watches import describe_product, save_product_watch

pytestmark = pytest.mark.django_db

JAN = "4901750404406"
OTHER_JAN = "4902102072618"
PRICES = (620, 520, 550, 505, 700)
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def five_shops(yahoo, prices=PRICES) -> list[str]:
    codes = []
    for number, price in enumerate(prices, start=1):
        code = f"store{number}_tp-12r"
        yahoo.add(code, jan=JAN, price=price, name=f"スコッティ 12ロール (store {number})")
        codes.append(code)
    return codes


@pytest.fixture
def product(yahoo):
    five_shops(yahoo)
    with time_machine.travel(START, tick=False):
        made = add_product(JAN)
    yahoo.requests.clear()
    return made


def poll_at(minutes: int, **kwargs):
    with time_machine.travel(START + dt.timedelta(minutes=minutes), tick=False):
        return poll_products(force=True, **kwargs)


# --- intake ----------------------------------------------------------------------------------


def test_a_new_jan_becomes_a_product_with_every_shops_offer_in_one_request(yahoo):
    five_shops(yahoo)
    product = add_product(parse_jan("４９０１７５０－４０４４０６"))
    assert product.jan == JAN and product.name == "スコッティ 12ロール (store 4)"
    offers = Listing.objects.filter(product=product).order_by("price")
    assert [o.price for o in offers] == sorted(PRICES)
    assert {o.source for o in offers} == {"yahoo"} and {o.jan for o in offers} == {JAN}
    assert PricePoint.objects.filter(listing__product=product).count() == 5
    assert yahoo.asked_for_jan(JAN) == 1 and len(yahoo.requests) == 1


def test_a_known_jan_is_not_asked_again(product, yahoo):
    assert add_product(JAN) == product
    assert yahoo.requests == []


@pytest.mark.parametrize(
    ("typed", "code"),
    [
        ("4901750404408", "jan_check_digit"),
        ("49017504044", "jan_length"),
        ("49017504O4406", "jan_not_digits"),
        ("", "jan_empty"),
    ],
)
def test_a_bad_jan_is_refused_before_any_request(yahoo, typed, code):
    with pytest.raises(IntakeError) as refused:
        parse_jan(typed)
    assert refused.value.code == code and refused.value.message
    assert yahoo.requests == []


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [("empty", "not_found"), ("server", "unreachable"), ("rate_limited", "unreachable")],
)
def test_a_jan_no_shop_offers_or_that_cannot_be_asked_writes_nothing(yahoo, behaviour, code):
    yahoo.behave[JAN] = behaviour
    with pytest.raises(IntakeError) as refused:
        add_product(JAN)
    assert refused.value.code == code
    assert not Product.objects.exists() and not Listing.objects.exists()


def test_a_listing_whose_jan_is_known_joins_its_product(yahoo):
    five_shops(yahoo)
    rakuten = ListingFactory(source="rakuten", item_code="shop:tp-12r", jan=JAN, price=480)
    product = product_from_listing(rakuten)
    rakuten.refresh_from_db()
    assert rakuten.product == product
    assert Listing.objects.filter(product=product).count() == 6


def test_a_listing_without_a_jan_has_no_product(yahoo):
    with pytest.raises(IntakeError) as refused:
        product_from_listing(ListingFactory(source="rakuten", item_code="shop:x"))
    assert refused.value.code == "no_jan" and yahoo.requests == []


def test_a_yahoo_item_link_opens_its_product(yahoo):
    five_shops(yahoo)
    found = add_by_link(parse_item_ref("https://store.shopping.yahoo.co.jp/store2/tp-12r.html"))
    assert isinstance(found, Product) and found.jan == JAN
    assert Listing.objects.get(item_code="store2_tp-12r").product == found


def test_a_yahoo_item_without_a_jan_stays_a_listing(yahoo):
    yahoo.add("store9_odd", jan="", price=300)
    found = add_by_link(parse_item_ref("https://store.shopping.yahoo.co.jp/store9/odd.html"))
    assert isinstance(found, Listing) and found.product is None and found.jan == ""


# --- polling ---------------------------------------------------------------------------------


def test_each_product_is_asked_once_per_run(product, yahoo):
    yahoo.add("other1_dt", jan=OTHER_JAN, price=900)
    add_product(OTHER_JAN)
    yahoo.requests.clear()
    result = poll_at(20)
    assert yahoo.asked_for_jan(JAN) == 1 and yahoo.asked_for_jan(OTHER_JAN) == 1
    assert len(yahoo.requests) == 2
    assert result.listings == 6 and result.observations == 6 and result.errors == 0


def test_a_new_shop_becomes_an_offer_and_a_shop_that_left_is_out_of_stock(product, yahoo):
    yahoo.add("store6_tp-12r", jan=JAN, price=499)
    del yahoo.items["store1_tp-12r"]
    poll_at(20)
    assert Listing.objects.get(item_code="store6_tp-12r").product == product
    gone = Listing.objects.get(item_code="store1_tp-12r")
    assert gone.in_stock is False and gone.price == 620 and gone.last_error == ""
    assert not PricePoint.objects.filter(listing=gone, in_stock=True, observed_at__gt=START)


def test_a_product_no_shop_offers_now_has_every_offer_out_of_stock(product, yahoo):
    yahoo.behave[JAN] = "empty"
    poll_at(20)
    assert set(Listing.objects.filter(product=product).values_list("in_stock", flat=True)) == {
        False
    }


def test_an_error_is_kept_on_the_product_and_tells_nothing_about_its_offers(product, yahoo):
    yahoo.behave[JAN] = "server"
    result = poll_at(20)
    product.refresh_from_db()
    assert product.last_error.startswith("yahoo server")
    assert result.errors == 0 and result.listings == 0
    assert set(Listing.objects.filter(product=product).values_list("in_stock", flat=True)) == {True}


def test_unknown_shipping_stays_unknown_on_the_offer(product, yahoo):
    yahoo.set("store2_tp-12r", shipping={"code": 3, "name": "条件付き送料無料"})
    poll_at(20)
    offer = Listing.objects.get(item_code="store2_tp-12r")
    assert offer.shipping is None and offer.price == 520


def test_a_product_polled_recently_is_not_due(product, yahoo):
    with time_machine.travel(START + dt.timedelta(minutes=1), tick=False):
        assert poll_products().listings == 0
    assert yahoo.requests == []


# --- product watches -------------------------------------------------------------------------


def watch(product, device=None, **params) -> Watch:
    made, _ = save_product_watch(
        device or DeviceFactory.create(),
        product,
        WatchParams(**{"trigger": Trigger.TARGET_PRICE, **params}),
    )
    return made


def test_a_watch_starts_at_the_best_offer(product):
    made = watch(product, target_price=500)
    assert made.product == product and made.listing.item_code == "store4_tp-12r"


def test_any_shop_at_or_below_the_target_enqueues_naming_that_shop(product, yahoo):
    made = watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    row = Outbox.objects.get(watch=made)
    payload = row.detected_payload
    assert (payload["shop"], payload["price"], payload["item_code"]) == (
        "ストア store3",
        480,
        "store3_tp-12r",
    )
    assert payload["jan"] == JAN and payload["shops_in_stock"] == 5
    made.refresh_from_db()
    assert made.listing.item_code == "store3_tp-12r"  # the offer the dispatcher re-fetches


def test_no_shop_at_or_below_the_target_enqueues_nothing(product, yahoo):
    made = watch(product, target_price=500)
    assert poll_at(20).enqueued == 0
    assert not Outbox.objects.filter(watch=made).exists()


def test_the_same_drop_is_enqueued_once_a_day(product, yahoo):
    watch(product, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 1
    yahoo.set("store3_tp-12r", price=470)
    assert poll_at(40).enqueued == 0
    assert Outbox.objects.count() == 1


def test_a_per_unit_target_compares_the_best_offer_per_unit(product, yahoo):
    describe_product(product, units_per_pack=12, unit_label="roll")
    made = watch(product, target_price=42, use_unit_price=True)
    assert made.use_unit_price
    yahoo.set("store4_tp-12r", price=504)  # ¥42.00 a roll
    assert poll_at(20).enqueued == 1
    assert Outbox.objects.get(watch=made).detected_payload["value"] == "42.00"


def test_the_cheapest_offer_n_percent_below_its_typical_enqueues(product, yahoo):
    for minutes in range(30, 60 * 24 * 3, 60 * 6):  # three days at ¥505 cheapest
        poll_at(minutes)
    made = watch(product, trigger=Trigger.PRICE_DROP, drop_percent=10)
    assert poll_at(60 * 24 * 3).enqueued == 0
    yahoo.set("store5_tp-12r", price=450)  # 10.9 % below the typical ¥505
    assert poll_at(60 * 24 * 3 + 30).enqueued == 1
    assert Outbox.objects.get(watch=made).detected_payload["shop"] == "ストア store5"


def test_back_in_stock_anywhere_after_no_shop_had_it(product, yahoo):
    made = watch(product, trigger=Trigger.BACK_IN_STOCK)
    yahoo.behave[JAN] = "empty"
    assert poll_at(20).enqueued == 0
    yahoo.behave.pop(JAN)
    for code in list(yahoo.items)[1:]:
        del yahoo.items[code]
    assert poll_at(40).enqueued == 1
    assert Outbox.objects.get(watch=made).detected_payload["shop"] == "ストア store1"


def test_back_in_stock_does_not_fire_while_some_shop_had_it(product, yahoo):
    watch(product, trigger=Trigger.BACK_IN_STOCK)
    yahoo.set("store1_tp-12r", inStock=False)
    poll_at(20)
    yahoo.set("store1_tp-12r", inStock=True)
    assert poll_at(40).enqueued == 0


def test_a_device_that_cannot_be_reached_keeps_what_it_missed(product, yahoo):
    device = SubscribedDeviceFactory(push_active=False)
    made = watch(product, device=device, target_price=500)
    yahoo.set("store3_tp-12r", price=480)
    assert poll_at(20).enqueued == 0
    made.refresh_from_db()
    assert made.missed_price == 480


# --- a paused offer is out of the product's history as detection reads it ------------------


def test_product_back_in_stock_fires_when_every_tracked_shop_was_out(yahoo):
    """A paused offer (staff stopped tracking it) last seen in stock must not keep the
    product "in stock somewhere" in the history detection reads: the restock after every
    tracked shop ran out is news."""
    codes = []
    for number, price in enumerate((620, 520, 550), start=1):
        code = f"store{number}_tp-12r"
        yahoo.add(code, jan=JAN, price=price, name=f"スコッティ 12ロール (store {number})")
        codes.append(code)
    with time_machine.travel(START, tick=False):
        product = add_product(JAN)
    offers = {o.item_code: o for o in product.offers.all()}
    # Staff stop tracking one shop's offer (last seen in stock).
    paused = offers[codes[0]]
    paused.paused = True
    paused.save(update_fields=["paused"])
    with time_machine.travel(START + dt.timedelta(minutes=5), tick=False):
        made, _ = save_product_watch(
            DeviceFactory.create(), product, WatchParams(trigger=Trigger.BACK_IN_STOCK)
        )
    # Every shop runs out; the tracked offers are observed out of stock.
    yahoo.behave[JAN] = "empty"
    assert poll_at(20).enqueued == 0
    # One tracked shop has it again.
    yahoo.behave.pop(JAN)
    assert poll_at(40).enqueued == 1
    assert Outbox.objects.filter(watch=made).exists()


# --- a product watch is judged whenever one of its offers is observed --------------------


def test_a_product_watch_is_judged_when_its_only_offer_is_polled(yahoo, settings):
    """On Yahoo! Shopping (a budget: the plan chooses the requests), a product with one shop's
    offer is polled as an item: its product watch is judged on that answer too."""
    from watches import tasks

    yahoo.add("store1_tp-12r", jan=JAN, price=1000, name="スコッティ 12ロール (store 1)")
    with time_machine.travel(START, tick=False):
        product = add_product(JAN)
        made, _ = save_product_watch(
            DeviceFactory.create(),
            product,
            WatchParams(trigger=Trigger.TARGET_PRICE, target_price=950),
        )
    yahoo.set("store1_tp-12r", price=900)
    with time_machine.travel(START + dt.timedelta(minutes=settings.POLL_MINUTES), tick=False):
        tasks.poll()
    offer = product.offers.get()
    assert offer.price == 900  # the offer was asked and observed at ¥900
    assert Outbox.objects.filter(watch=made).count() == 1
