"""Unit labels (what a pack counts: rolls, grams…) in the reader's language, and a price per
unit in words. Labels are data typed by staff or the demo catalogue; the common ones are
translated, any other is shown as typed."""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

# Symbols (g, ml, kg, l) read the same in both languages and stay as they are.
KNOWN: dict[str, Promise] = {
    "roll": gettext_lazy("roll"),
    "box": gettext_lazy("box"),
    "pc": gettext_lazy("piece"),
    "piece": gettext_lazy("piece"),
    "sheet": gettext_lazy("sheet"),
    "bag": gettext_lazy("bag"),
    "can": gettext_lazy("can"),
    "cup": gettext_lazy("cup"),
    "bottle": gettext_lazy("bottle"),
    "pack": gettext_lazy("pack"),
    "tablet": gettext_lazy("tablet"),
}


def unit_name(label: str) -> str:
    """The label in the active language; "unit" when there is none."""
    if not label:
        return _("unit")
    return str(KNOWN.get(label.strip().lower(), label))


def per_unit(price: str, label: str) -> str:
    """ "¥49.17 per roll" (ja: "1ロールあたり ¥49.17"); `price` is already formatted."""
    return _("%(price)s per %(unit)s") % {"price": price, "unit": unit_name(label)}
