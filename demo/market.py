"""The demo market moving: by hand (`set_product`: a person sets a price, the stock or a
simulated fault) and on its own (`tick`: sales that start and end, wobbles, stock-outs and
recoveries; `tick_campaigns`: points campaigns that open and close), so the outbox has
something to do."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from demo.catalogue import LIST_PRICE
from demo.models import DemoProduct

MAX_PRICE = 10_000_000


def set_product(
    code: str,
    *,
    price: int | None = None,
    in_stock: bool | None = None,
    fault: str | None = None,
    now: dt.datetime | None = None,
) -> DemoProduct:
    """Change one demo product's price, stock and/or simulated fault (`""` for none). A price
    or stock set by hand is held: the demo tick leaves the product alone for
    DEMO_HOLD_MINUTES. Raises LookupError for an unknown code, ValueError for a bad value,
    with nothing changed."""
    if price is None and in_stock is None and fault is None:
        raise ValueError("nothing to change: give a price, the stock or a fault")
    if price is not None and not 1 <= price <= MAX_PRICE:
        raise ValueError(f"price must be between ¥1 and ¥{MAX_PRICE:,}")
    if fault is not None and fault not in DemoProduct.Fault.values:
        raise ValueError(f"unknown fault {fault!r}")
    try:
        product = DemoProduct.objects.get(item_code=code)
    except DemoProduct.DoesNotExist:
        raise LookupError(f"no demo product {code!r} (see `demo_market list`)") from None
    if price is not None:
        product.price = price
    if in_stock is not None:
        product.in_stock = in_stock
    if fault is not None:
        product.fault = fault
    if price is not None or in_stock is not None:
        hold(product, now or timezone.now())
    product.save()
    return product


def hold(product: DemoProduct, now: dt.datetime) -> None:
    """Mark a price or stock as set by hand: the tick leaves it alone for DEMO_HOLD_MINUTES,
    long enough for a poll to see it and the dispatcher to send what it triggers."""
    product.held_until = now + dt.timedelta(minutes=settings.DEMO_HOLD_MINUTES)


def movable(now: dt.datetime) -> QuerySet[DemoProduct]:
    """The products the tick may move: in the catalogue (staff's own products stay as they
    made them), answering normally (a simulated fault stays until staff lift it) and not
    held after a change by hand."""
    return DemoProduct.objects.filter(item_code__in=LIST_PRICE, fault="").exclude(
        held_until__gt=now
    )


# The market's moods, per product and tick. A sale is a price below 92 % of the list price;
# everyday wobbles never go that low, so a sale is always a real event.
_SALE_STARTS = 0.08
_SALE_ENDS = 0.3
_SELLS_OUT = 0.03
_RESTOCKS = 0.35
_WOBBLES = 0.3
_SALE_BELOW = 0.92


@dataclass(frozen=True)
class Move:
    """One product's change in one tick."""

    code: str
    what: str  # sale, sale over, wobble, sold out, restocked
    old_price: int
    new_price: int
    in_stock: bool
    was_in_stock: bool


def tick(rng: random.Random | None = None, now: dt.datetime | None = None) -> list[Move]:
    """Move the demo market one step: a random walk of the movable products' prices around
    their list price (sales that start and end, small wobbles pulled back to the list price)
    and of their stock (rare stock-outs, quick recoveries). Returns what moved."""
    now = now or timezone.now()
    return apply_moves(plan_moves(rng or random.Random(), now), now)


def plan_moves(rng: random.Random, now: dt.datetime) -> list[Move]:
    """One tick's moves of the products movable at `now`, in item-code order; writes
    nothing."""
    moves = []
    for product in movable(now).order_by("item_code"):
        move = _step(product, LIST_PRICE[product.item_code], rng)
        if move is not None:
            moves.append(move)
    return moves


def apply_moves(moves: list[Move], now: dt.datetime) -> list[Move]:
    """Write the moves, each only if its product is still as planned and still movable: a
    person who set a price or a fault meanwhile wins. Returns the moves written."""
    applied = []
    for move in moves:
        still = movable(now).filter(
            item_code=move.code, price=move.old_price, in_stock=move.was_in_stock
        )
        if still.update(price=move.new_price, in_stock=move.in_stock, updated_at=now):
            applied.append(move)
    return applied


def _step(product: DemoProduct, list_price: int, rng: random.Random) -> Move | None:
    old, stocked = product.price, product.in_stock
    if not stocked:
        if rng.random() >= _RESTOCKS:
            return None
        return Move(product.item_code, "restocked", old, old, True, stocked)
    if rng.random() < _SELLS_OUT:
        return Move(product.item_code, "sold out", old, old, False, stocked)
    if old < list_price * _SALE_BELOW:
        if rng.random() >= _SALE_ENDS:
            return None
        new = round(list_price * rng.uniform(0.97, 1.03))
        return Move(product.item_code, "sale over", old, new, True, stocked)
    if rng.random() < _SALE_STARTS:
        new = round(list_price * rng.uniform(0.72, 0.88))
        return Move(product.item_code, "sale", old, new, True, stocked)
    if rng.random() >= _WOBBLES:
        return None
    wobbled = old * rng.uniform(0.985, 1.015)
    pulled = wobbled + 0.2 * (list_price - wobbled)  # back towards the list price
    low, high = list_price * (_SALE_BELOW + 0.01), list_price * 1.1
    new = round(min(max(pulled, low), high))
    if new == old:
        return None
    return Move(product.item_code, "wobble", old, new, True, stocked)


# Points campaigns, per product and tick: one starts now and then (at once, or in a few hours:
# announced before it holds), for a few hours to two days; one that has ended is cleared.
_CAMPAIGN_STARTS = 0.02
_CAMPAIGN_RATES = (2, 3, 5, 10)
_CAMPAIGN_HOURS = (3, 6, 12, 24, 48)
_CAMPAIGN_LATER = 0.3


@dataclass(frozen=True)
class CampaignMove:
    """One product's points campaign starting (announced) or cleared after its end."""

    code: str
    what: str  # campaign, campaign over
    rate: int
    start: dt.datetime | None
    end: dt.datetime | None


def tick_campaigns(
    rng: random.Random | None = None, now: dt.datetime | None = None
) -> list[CampaignMove]:
    """Open and close the movable products' points campaigns: an ended one is cleared (the
    standard 1 again); a product without one may get one — multiplier 2 to 10, holding from
    now or from a few hours on, for a few hours to two days. Each is written only while the
    product's campaign is still as planned. Returns what moved."""
    rng = rng or random.Random()
    now = now or timezone.now()
    moves = []
    for product in movable(now).order_by("item_code"):
        move = _campaign_step(product, rng, now)
        if move is None:
            continue
        still = movable(now).filter(
            item_code=product.item_code,
            point_rate=product.point_rate,
            points_until=product.points_until,
        )
        if still.update(
            point_rate=move.rate, points_from=move.start, points_until=move.end, updated_at=now
        ):
            moves.append(move)
    return moves


def _campaign_step(
    product: DemoProduct, rng: random.Random, now: dt.datetime
) -> CampaignMove | None:
    if product.points_until is not None and product.points_until <= now:
        return CampaignMove(product.item_code, "campaign over", 1, None, None)
    if product.point_rate > 1 or rng.random() >= _CAMPAIGN_STARTS:
        return None
    start = now
    if rng.random() < _CAMPAIGN_LATER:
        start += dt.timedelta(hours=rng.choice((1, 2, 4)))
    end = start + dt.timedelta(hours=rng.choice(_CAMPAIGN_HOURS))
    return CampaignMove(product.item_code, "campaign", rng.choice(_CAMPAIGN_RATES), start, end)
