"""The one interface to a marketplace: fetch item codes, get an observation or an error kind.

The dispatcher and price polling speak only this; each marketplace is one module behind it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Protocol

from common.registry import configured_instance
from watches.models import effective_price, unit_price


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


@dataclass(frozen=True, slots=True)
class Observation:
    """What the marketplace says about one item right now."""

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

    @property
    def effective_price(self) -> int | None:
        return effective_price(self.price, self.shipping)

    def unit_price(self, units_per_pack: int | None) -> Decimal | None:
        return unit_price(self.effective_price, units_per_pack)

    def as_json(self) -> dict:
        return {
            "item_code": self.item_code,
            "price": self.price,
            "shipping": self.shipping,
            "in_stock": self.in_stock,
            "observed_at": self.observed_at.isoformat(),
        }


FetchResult = Observation | FetchError


@dataclass(frozen=True)
class Offers:
    """Every shop's offer of one product (a JAN code) on one marketplace right now, each an
    Observation of that shop's item (its `extra` holds the JAN code the marketplace gave)."""

    jan: str
    offers: tuple[Observation, ...]
    observed_at: dt.datetime


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


def get_marketplace(source: str) -> Marketplace:
    """A new instance of the adapter configured for `source` in MARKETPLACE_ADAPTERS."""
    return configured_instance("MARKETPLACE_ADAPTERS", source, what="marketplace adapter")
