"""Formatting for the pages: yen, unit prices, changes, times in the service's zone."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from decimal import Decimal

from django import template
from django.conf import settings
from django.utils import dateformat
from django.utils.translation import pgettext

from watches import units
from watches.search import vocabulary

register = template.Library()


@register.filter
def yen(value: int | float | Decimal | None) -> str:
    """`1280` → `¥1,280`; fractions (unit prices) keep two decimals: `¥49.83`."""
    if value is None or value == "":
        return "—"
    number = Decimal(str(value))
    if number == number.to_integral_value():
        return f"¥{int(number):,}"
    return f"¥{number:,.2f}"


@register.filter
def signed_percent(value: float | None) -> str:
    if value is None:
        return ""
    if value == 0:
        return "±0%"
    return f"{value:+.1f}%".replace("-", "−")


@register.filter
def per_unit(price: str, label: str) -> str:
    """`{{ listing.unit_price|yen|per_unit:listing.unit_label }}` → "¥49.83 per roll"."""
    return units.per_unit(price, label or "")


@register.filter
def category_label(name: str) -> str:
    """A listing's category in the reader's language."""
    return vocabulary.category_label(name or "")


@register.filter
def unit_name(label: str) -> str:
    return units.unit_name(label or "")


@register.filter
def when(value: dt.datetime | None) -> str:
    """A moment in the service's time zone (Asia/Tokyo unless configured otherwise), in the
    reader's language: "Nov 29, 12:05" / "11月29日 12:05"; with the year when it is not this
    year's."""
    if value is None:
        return ""
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    local = value.astimezone(zone)
    if local.year == dt.datetime.now(zone).year:
        fmt = pgettext("date and time on pages, PHP-style format", "M j, H:i")
    else:
        fmt = pgettext("date and time on pages, with the year, PHP-style format", "M j, Y, H:i")
    return dateformat.format(local, fmt)


@register.filter
def breakdown(offer: object) -> str:
    """An offer's price as a shopper works it out, each term kept whole on a narrow screen:
    "¥1,980 − 90 pt (5×, until 3/19 13:59) = ¥1,890, free shipping" (`watches.points`)."""
    from watches.points import Breakdown

    return Breakdown.of(offer).html()


@register.filter
def campaign(offer: object) -> str:
    """A listing's points campaign in words: "(5×, until 3/19 13:59)" while it is on, "5×
    ended 3/19 13:59" once it has ended since it was seen, "" without one."""
    from watches.points import Breakdown, last_minute

    if getattr(offer, "campaign_on", None) is False:
        rate = getattr(offer, "point_rate", None)
        end = last_minute(offer.points_until)  # type: ignore[attr-defined]
        if rate and rate > 1:
            return pgettext("points campaign", "%(rate)s× ended %(end)s") % {
                "rate": rate,
                "end": end,
            }
        return pgettext("points campaign", "ended %(end)s") % {"end": end}
    return Breakdown.of(offer).campaign
