"""Product watches: the triggers of `watches.triggers`, judged on the best offer of every
shop rather than on one listing.

- `target_price`: any shop at or below the watcher's price, per pack or per unit;
- `price_drop`: the cheapest offer N % below the product's typical price (the time-weighted
  median of its cheapest offer over 30 days);
- `back_in_stock`: in stock at any shop after no shop had it (with a target, at or below it).

The history is the product's (`watches.products.offers.cheapest_points`), so re-arming follows the
cheapest offer: a new notification needs a lower best price than the last one told, or the
best price back above the line and crossing it again. `lowest` is not offered for products.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from watches.models import Trigger
from watches.products.offers import OfferLike, OfferT, best_offer, points_of
from watches.triggers import History, Judgement, WatchLike, detect, members_count

PRODUCT_TRIGGERS = (Trigger.TARGET_PRICE, Trigger.PRICE_DROP, Trigger.BACK_IN_STOCK)


@dataclass(frozen=True)
class _NoOffer:
    price: int | None = None
    shipping: int | None = None
    in_stock: bool = False
    points: int = 0
    member_points: int = 0


def detect_best(
    watch: WatchLike,
    units_per_pack: int | None,
    offers: Sequence[OfferT],
    history: History,
    *,
    members: bool = False,
) -> tuple[Judgement, OfferT | None]:
    """Should the product's offers now enqueue a notification for `watch`? Judged on the
    best offer in stock — the cheapest after points for a watch after points, whichever
    shop — (returned with the judgement; None when no shop has it), against `history`, the
    product's cheapest offer over time judged the same way."""
    best = best_offer(
        offers, after_points=watch.after_points, members=members_count(watch, members)
    )
    judgement = detect(
        watch,
        units_per_pack,
        _Now(best) if best is not None else _NoOffer(),
        history,
        members=members,
    )
    return judgement, best


@dataclass(frozen=True)
class _Now:
    """An offer as it is now: a listing's points as they are at this moment."""

    offer: OfferLike

    @property
    def price(self) -> int | None:
        return self.offer.price

    @property
    def shipping(self) -> int | None:
        return self.offer.shipping

    @property
    def in_stock(self) -> bool:
        return bool(self.offer.in_stock)

    @property
    def points(self) -> int:
        return points_of(self.offer)

    @property
    def member_points(self) -> int:
        return getattr(self.offer, "member_points", 0) or 0
