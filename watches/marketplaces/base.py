"""The one interface to a marketplace: fetch item codes, get an observation or an error kind;
or ask for pages of items (a shop's, a product's offers, a keyword's): many prices a request.

The dispatcher and price polling speak only this; each marketplace is one module behind it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, cast

from common.registry import configured_instance
from common.text import clip
from watches.marketplaces.answers import MAX_DETAIL
from watches.marketplaces.ratelimit import Budget, LimiterUnavailable, Slot
from watches.models import effective_price, net_price, unit_price


class FetchKind(StrEnum):
    EMPTY = "empty"  # listed but out of stock / no offer
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    NETWORK = "network"
    BAD_RESPONSE = "bad_response"
    # The marketplace will not answer until a person acts: a retired API version, a missing
    # or wrong access key or application id, a site or IP address the registration does not
    # allow. Its detail says what to fix (the setting, or the registration) in words.
    CONFIG = "config"

    @property
    def transient(self) -> bool:
        return self in TRANSIENT_KINDS


# CONFIG is not among them: asking again changes nothing until a person acts.
TRANSIENT_KINDS = frozenset(
    {FetchKind.RATE_LIMITED, FetchKind.SERVER, FetchKind.NETWORK, FetchKind.BAD_RESPONSE}
)


@dataclass(frozen=True)
class FetchError:
    kind: FetchKind
    detail: str = ""
    retry_after: float | None = None  # seconds, when the marketplace said so
    # Our own side could not ask (the fleet's shared limiter unreachable): no request was
    # made, and the marketplace said nothing. The dispatcher retries such a row without
    # counting a retry — an outage of ours must not use up what the cap allows for the shop's.
    ours: bool = False
    # No request was made: the key is not one the marketplace would answer (a page past its
    # last, a code of another form). It says nothing of the marketplace's configuration.
    unasked: bool = False
    # A `config` fault's application (its id's label, `ratelimit.app_id_label`) when the
    # marketplace has several: a halt's probe goes out under it (`probe_application`).
    application: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the marketplace says about one item right now.

    Its points (1 pt = ¥1, `watches.points`): `points` is what everyone gets now — the
    campaign's, when one holds —, `points_until` when that campaign ends (exclusive) and
    `points_after` what is left then, `point_rate` the campaign's multiplier ("5倍"), and
    `member_points` what only premium members get on top (LYP premium): shown, counted only
    for a device that says it is one."""

    item_code: str
    price: int | None
    in_stock: bool
    observed_at: dt.datetime
    shipping: int | None = None
    name: str = ""
    url: str = ""
    image_url: str = ""
    shop_name: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)
    points: int = 0
    points_until: dt.datetime | None = None
    points_after: int | None = None
    point_rate: int | None = None
    member_points: int = 0

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    @property
    def net_price(self) -> int | None:
        """Price + known shipping − the points everyone gets (実質価格)."""
        return net_price(self.price, self.shipping, self.points)

    def unit_price(self, units_per_pack: int | None) -> Decimal | None:
        return unit_price(self.effective_price, units_per_pack)

    def as_json(self) -> dict[str, Any]:
        return {
            "item_code": self.item_code,
            "price": self.price,
            "shipping": self.shipping,
            "in_stock": self.in_stock,
            "observed_at": self.observed_at.isoformat(),
            "points": self.points,
            "points_until": self.points_until.isoformat() if self.points_until else None,
            "point_rate": self.point_rate,
            "member_points": self.member_points,
        }


FetchResult = Observation | FetchError


@dataclass(frozen=True)
class Offers:
    """Every shop's offer of one product (a JAN code) on one marketplace right now, each an
    Observation of that shop's item (its `extra` holds the JAN code the marketplace gave)."""

    jan: str
    offers: tuple[Observation, ...]
    observed_at: dt.datetime
    # Every offer the marketplace holds is here. False: it said it holds more than the one page
    # answered (a popular product's pricier offers), so an offer missing here is not gone.
    complete: bool = True


OffersResult = Offers | FetchError


class Marketplace(Protocol):
    source: str

    def fetch(self, item_codes: Iterable[str]) -> dict[str, FetchResult]:
        """One result per requested code; never raises for an outcome of the outside world."""
        ...


class OfferSearch(Marketplace, Protocol):
    """A marketplace that can answer, in one request, every shop's offer of a JAN code."""

    def offers(self, jans: Iterable[str]) -> dict[str, OffersResult]:
        """One result per requested JAN code: its offers, or an error kind (`empty` when no
        shop offers it now); never raises for an outcome of the outside world."""
        ...


class Shape(StrEnum):
    """What one request asks for (docs/marketplaces.md has each marketplace's parameters)."""

    ITEM = "item"  # one item by its code (what `fetch` asks)
    SHOP = "shop"  # one shop's items, most recently updated first where the API can sort so
    PRODUCT = "product"  # every shop's offer of one JAN code, cheapest first, in stock only
    KEYWORD = "keyword"  # a free-text query (e.g. a product's name), cheapest first, in stock


@dataclass(frozen=True)
class Ask:
    """One request: a shape, its key (an item code, a shop code — Rakuten's shopCode, Yahoo's
    seller_id —, a JAN code or a keyword) and the page of the answer (1 = the first)."""

    shape: Shape
    key: str
    page: int = 1


@dataclass(frozen=True)
class Page:
    """One page of an answer: every item on it, in the answer's order, whether we know the
    item or not (storing only the known ones is the caller's job). Each Observation's
    `extra` holds `"shop"` (its shop code), `"jan"` and `"updated_at"` (an aware datetime)
    when the answer says them."""

    ask: Ask
    items: tuple[Observation, ...]
    observed_at: dt.datetime
    total: int | None = None  # items matching in all, when the marketplace says
    last_page: int | None = None  # the last page the marketplace would answer for this key
    # Items on the page that could not be read (a field missing or mistyped) and are not in
    # `items`: the page shows less than it holds.
    unread: int = 0


PageResult = Page | FetchError


class PageSearch(Marketplace, Protocol):
    """A marketplace that answers many items a request, in pages."""

    per_page: int  # items one request answers at most
    max_page: int  # the last page any key may ask for (pages past a key's last are empty)
    shapes: frozenset[Shape]  # the shapes it answers
    # SHOP pages come most recently updated first (Rakuten); False: in another stable order
    # the API documents (Yahoo! Shopping documents no update-time sort).
    shop_by_update: bool

    def shop_of(self, item_code: str) -> str | None:
        """The shop code `item_code` belongs to, or None when the code says no shop."""
        ...

    def pages(self, asks: Iterable[Ask]) -> dict[Ask, PageResult]:
        """One request per distinct Ask, through the budget, in the order given; never raises
        for an outcome of the outside world. An ask the marketplace would refuse is answered
        without a request: a page outside 1..`max_page` `empty`, a shape it does not answer
        or an empty key `not_found`. A page past the key's last is a Page without items."""
        ...


def unaskable(ask: Ask, shapes: frozenset[Shape], max_page: int) -> FetchError | None:
    """Why `ask` is not worth a request (the marketplace would refuse it), or None."""
    if ask.shape not in shapes or not ask.key.strip():
        detail = f"no {ask.shape} to ask for: {ask.key[:100]!r}"
        return FetchError(FetchKind.NOT_FOUND, detail, unasked=True)
    if not 1 <= ask.page <= max_page:
        detail = f"page {ask.page} is not one of 1 to {max_page}"
        return FetchError(FetchKind.EMPTY, detail, unasked=True)
    return None


def get_marketplace(source: str) -> Marketplace:
    """A new instance of the adapter configured for `source` in MARKETPLACE_ADAPTERS."""
    # The setting names the class by import path: its type is known only at run time.
    return cast(
        Marketplace,
        configured_instance("MARKETPLACE_ADAPTERS", source, what="marketplace adapter"),
    )


# The application a halted marketplace's probe goes out under, by its label: the one whose
# fault halted it — a probe answered under another id would say nothing of that one, and lift
# a halt the next request through it would start again. Set by `halts.guard` for its probe.
probe_application: ContextVar[str] = ContextVar("probe_application", default="")


def take_slot(budget: Budget, max_wait: float | None, only: str | None = None) -> Slot | FetchError:
    """A request's slot of `budget` (of application id `only`, when given), or why there is
    none: the fleet's allowance is unknown (the limiter unreachable: `ours`, and the rest of
    the batch should not ask either — each try could wait out a timeout), or a 429 holds it
    off longer than a caller should block (rate limited without asking; the next try is
    refused at once the same way)."""
    try:
        slot = budget.acquire(max_wait=max_wait, only=only)
        if slot is None:
            # Asks the limiter again: Redis can be lost between the two calls.
            wait = budget.wait_needed()
            return FetchError(
                FetchKind.RATE_LIMITED, "waiting out the rate limit", retry_after=wait
            )
    except LimiterUnavailable as exc:
        return FetchError(FetchKind.RATE_LIMITED, clip(str(exc), MAX_DETAIL), ours=True)
    return slot
