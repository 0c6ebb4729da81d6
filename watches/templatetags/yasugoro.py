"""Formatting for the pages: yen, unit prices, changes."""

from __future__ import annotations

from decimal import Decimal

from django import template

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
