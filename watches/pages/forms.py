"""The pages' forms: what a person may type, and the message next to the field when it is
not acceptable. Views only bind them and hand the cleaned values to plain functions."""

from __future__ import annotations

import re
import unicodedata

from django import forms
from django.utils.translation import gettext_lazy as _

from watches import units
from watches.intake import MAX_INPUT, IntakeError, ItemRef, parse_item_ref
from watches.models import POINT_SOURCES, Listing, NotifyVia, Trigger
from watches.pages.watchlist import WatchParams
from watches.products.intake import parse_jan
from watches.triggers import DEFAULT_DROP_PERCENT

# Above this a target is a typing slip, not a price anyone waits for on a consumable.
MAX_TARGET_YEN = 10_000_000
MIN_DROP_PERCENT, MAX_DROP_PERCENT = 1, 90
# Triggers that read the watcher's target (and may compare it per unit).
TARGET_TRIGGERS = (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK)
# Long enough for "¥10,000,000 円" typed with spaces; anything longer is not a number.
_MAX_NUMBER_TEXT = 30
# What people type around a number: yen signs (NFKC folds the full-width ￥ to ¥), 円,
# thousands separators, spaces, a percent sign.
_DECORATION = re.compile(r"[¥\\円,、\s%]")
_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]*\.[0-9]+")


def _plain_number(text: str) -> str:
    """NFKC folds full-width digits (１２８０) into ASCII, then decoration goes."""
    return _DECORATION.sub("", unicodedata.normalize("NFKC", text))


class NumberText(forms.TextInput):
    """A text box with the numeric keypad on phones. Not `type=number`: that would refuse
    "1,280" or "¥1280" in the browser, with the browser's own wording in its own language,
    before our clear message next to the field could say anything."""

    def __init__(self, attrs: dict | None = None) -> None:
        super().__init__(
            {
                "inputmode": "numeric",
                "autocomplete": "off",
                "maxlength": _MAX_NUMBER_TEXT,
                **(attrs or {}),
            }
        )


class WatchForm(forms.Form):
    """One watch on one listing: the trigger and its one parameter.

    Only the chosen trigger's parameter is read: a value left in another trigger's box (the
    page without JavaScript shows them all) is ignored, never an error."""

    trigger = forms.ChoiceField(
        label=_("Tell me when"),
        choices=Trigger.choices,
        initial=Trigger.TARGET_PRICE,
        error_messages={
            "required": _("Choose when we should tell you."),
            "invalid_choice": _("Choose one of the listed kinds of alert."),
        },
    )
    target_price = forms.CharField(
        label=_("Your price (yen)"),
        required=False,
        strip=True,
        widget=NumberText({"placeholder": "1280"}),
        help_text=_("We tell you when the price incl. shipping is at or below it."),
    )
    drop_percent = forms.CharField(
        label=_("How big a drop (%)"),
        required=False,
        strip=True,
        initial=DEFAULT_DROP_PERCENT,
        widget=NumberText({"size": 4}),
        help_text=_("1 to 90 % below its typical price of the last 30 days."),
    )
    use_unit_price = forms.BooleanField(required=False)
    after_points = forms.BooleanField(
        label=_("Count the points (price after points and shipping)"),
        required=False,
        help_text=_(
            "We compare the price + shipping − the points every shopper gets now, as "
            "shoppers compare offers. Unticked: the price incl. shipping."
        ),
    )

    def __init__(self, *args, listing: Listing, gives_points: bool | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.listing = listing
        if gives_points is None:
            gives_points = getattr(listing, "source", "") in POINT_SOURCES
        if gives_points:
            # New watches judge after points where the marketplace gives points.
            self.fields["after_points"].initial = True
            self.fields["target_price"].help_text = _(
                "We tell you when the price is at or below it: after points and shipping "
                "when you count the points."
            )
        else:
            del self.fields["after_points"]
        if listing.units_per_pack:
            unit = units.unit_name(listing.unit_label)
            self.fields["use_unit_price"].label = _("My price is per %(unit)s") % {"unit": unit}
            self.fields["use_unit_price"].help_text = _(
                "Compare the price per %(unit)s (%(units)s in this pack) instead of per pack."
            ) % {"unit": unit, "units": listing.units_per_pack}
        else:
            # Without units per pack there is nothing to divide by.
            del self.fields["use_unit_price"]

    def _chosen(self) -> str | None:
        return self.cleaned_data.get("trigger")

    def clean_target_price(self) -> int | None:
        trigger = self._chosen()
        text = self.cleaned_data.get("target_price", "")
        if trigger not in TARGET_TRIGGERS:
            return None
        if not text:
            if trigger == Trigger.TARGET_PRICE:
                raise forms.ValidationError(
                    _("Enter the price you want to pay, in yen."), code="required"
                )
            return None  # back in stock: a target is optional
        return _parse_yen(text)

    def clean_drop_percent(self) -> int | None:
        if self._chosen() != Trigger.PRICE_DROP:
            return None
        text = self.cleaned_data.get("drop_percent", "")
        if not text:
            raise forms.ValidationError(
                _("Enter how big a drop you wait for, from 1 to 90 %."), code="required"
            )
        number = _plain_number(text)
        if len(text) > _MAX_NUMBER_TEXT or not _INTEGER.fullmatch(number):
            raise forms.ValidationError(
                _("Enter a whole number from 1 to 90, such as 15."), code="invalid"
            )
        percent = int(number)
        if not MIN_DROP_PERCENT <= percent <= MAX_DROP_PERCENT:
            raise forms.ValidationError(_("The drop must be from 1 to 90 %."), code="out_of_range")
        return percent

    def clean_use_unit_price(self) -> bool:
        return bool(self.cleaned_data.get("use_unit_price")) and self._chosen() in TARGET_TRIGGERS

    def params(self) -> WatchParams:
        """The cleaned values; call after is_valid()."""
        data = self.cleaned_data
        return WatchParams(
            trigger=data["trigger"],
            target_price=data.get("target_price"),
            drop_percent=data.get("drop_percent"),
            use_unit_price=bool(data.get("use_unit_price")),
            after_points=bool(data.get("after_points")),
        )

    @classmethod
    def initial_for(cls, watch) -> dict:
        """The form's values for editing an existing watch."""
        return {
            "trigger": watch.trigger,
            "target_price": watch.target_price if watch.target_price is not None else "",
            "drop_percent": watch.drop_percent or DEFAULT_DROP_PERCENT,
            "use_unit_price": watch.use_unit_price,
            "after_points": watch.after_points,
        }


def _parse_yen(text: str) -> int:
    number = _plain_number(text)
    if len(text) > _MAX_NUMBER_TEXT or not (
        _INTEGER.fullmatch(number) or _DECIMAL.fullmatch(number)
    ):
        raise forms.ValidationError(_("Enter a whole number of yen, such as 1280."), code="invalid")
    if _DECIMAL.fullmatch(number):
        raise forms.ValidationError(
            _("Enter whole yen, without decimals, such as 1280."), code="invalid"
        )
    amount = int(number)
    if amount <= 0:
        raise forms.ValidationError(_("The price must be more than ¥0."), code="min_value")
    if amount > MAX_TARGET_YEN:
        raise forms.ValidationError(
            _("That is more than ¥10,000,000. Enter the price you would really pay."),
            code="max_value",
        )
    return amount


class AddByLinkForm(forms.Form):
    """A marketplace item URL or code. Only parsed here; the view fetches it."""

    link = forms.CharField(
        label=_("Item link or code"),
        max_length=MAX_INPUT,
        error_messages={
            "required": _("Paste the item's address from the marketplace, or its code."),
            "max_length": _("That is too long to be an item code or URL."),
        },
        widget=forms.TextInput(
            {
                "placeholder": "https://item.rakuten.co.jp/shop/item/",
                "autocomplete": "off",
                "inputmode": "url",
                "spellcheck": "false",
                "autocapitalize": "off",
            }
        ),
        help_text=_("A Rakuten Ichiba item page address, or an item code such as shop:item."),
    )

    def clean_link(self) -> str:
        text = self.cleaned_data["link"]
        try:
            self.ref: ItemRef = parse_item_ref(text)
        except IntakeError as error:
            raise forms.ValidationError(error.message, code=error.code) from None
        return text


class EmailAddressForm(forms.Form):
    """The address notifications may go to once it is confirmed."""

    email = forms.EmailField(
        label=_("E-mail address"),
        max_length=254,
        error_messages={
            "required": _("Enter an e-mail address."),
            "invalid": _("Enter a valid e-mail address, such as name@example.com."),
        },
    )

    def clean_email(self) -> str:
        from watches.email_address import encodable, normalise, public_domain

        address = normalise(self.cleaned_data["email"])
        domain = address.rpartition("@")[2]
        if not encodable(address):
            raise forms.ValidationError(
                _(
                    "We cannot send mail to “%(domain)s”: it holds a character no mail domain "
                    "can, perhaps an invisible one copied with it. Type the address again, such "
                    "as name@example.com."
                ),
                code="not_encodable",
                params={"domain": domain},
            )
        if not public_domain(domain):
            raise forms.ValidationError(
                _(
                    "We cannot send mail to “%(domain)s”: it is an IP address, a local network "
                    "name or a reserved name, not a public mail domain. Enter the address you "
                    "receive mail at, such as name@example.com."
                ),
                code="not_public",
                params={"domain": domain},
            )
        return address


class NotifyViaForm(forms.Form):
    notify_via = forms.ChoiceField(
        label=_("Tell me by"),
        choices=NotifyVia.choices,
        widget=forms.RadioSelect,
        error_messages={"invalid_choice": _("Choose push notifications, e-mail or both.")},
    )


def _clock_time(label, invalid) -> forms.TimeField:
    """An optional HH:MM time, with the browser's time picker."""
    return forms.TimeField(
        label=label,
        required=False,
        input_formats=["%H:%M"],
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
        error_messages={"invalid": invalid},
    )


class QuietHoursForm(forms.Form):
    """A daily window with no notifications, in the device's time zone. Both times empty
    turns it off."""

    quiet_start = _clock_time(_("From"), _("Enter a time such as 22:00."))
    quiet_end = _clock_time(_("Until"), _("Enter a time such as 07:00."))
    time_zone = forms.CharField(label=_("Time zone"), max_length=64, initial="Asia/Tokyo")

    def clean_time_zone(self) -> str:
        import zoneinfo

        name = self.cleaned_data["time_zone"].strip()
        if name not in zoneinfo.available_timezones():
            raise forms.ValidationError(_("Enter a time zone such as Asia/Tokyo."))
        return name

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None  # forms.Form.clean returns cleaned_data
        start, end = data.get("quiet_start"), data.get("quiet_end")
        if (start is None) != (end is None) and not self.errors:
            raise forms.ValidationError(
                _("Give both times, or leave both empty to turn quiet hours off.")
            )
        if start is not None and start == end:
            raise forms.ValidationError(_("The window must end at another time than it starts."))
        return data


class PointsForm(forms.Form):
    """Which member-only points count for this device's watches after points."""

    lyp_premium = forms.BooleanField(
        label=_("I am an LYP premium member"),
        required=False,
        help_text=_(
            "Yahoo! Shopping gives LYP premium members extra points. We always show them; "
            "ticked, we also take them off the price your own targets compare."
        ),
    )


class ProductWatchForm(WatchForm):
    """A watch on every shop's offer of a product: the triggers that make sense across shops
    ("any shop at or below", "the cheapest N % below typical", "back in stock anywhere").
    `product` gives the pack size (units per pack, unit label) as a listing does."""

    def __init__(self, *args, product, **kwargs) -> None:
        sources = set(product.offers.values_list("source", flat=True)) if product.pk else set()
        super().__init__(
            *args, listing=product, gives_points=bool(sources & POINT_SOURCES), **kwargs
        )
        trigger = self.fields["trigger"]
        assert isinstance(trigger, forms.ChoiceField)  # as WatchForm declares it
        trigger.choices = [
            (Trigger.TARGET_PRICE.value, _("Any shop at or below my price")),
            (Trigger.PRICE_DROP.value, _("The cheapest drops by a percentage")),
            (Trigger.BACK_IN_STOCK.value, _("Back in stock at any shop")),
        ]
        self.fields["target_price"].help_text = _(
            "We tell you when any shop's price incl. shipping is at or below it."
        )
        if "after_points" in self.fields:
            self.fields["target_price"].help_text = _(
                "We tell you when any shop's price is at or below it (after points and "
                "shipping when you count the points)."
            )


class AddByJanForm(forms.Form):
    """A JAN code, typed or read by the camera. Only checked here; the view asks the
    marketplaces."""

    jan = forms.CharField(
        label=_("JAN code (the barcode's digits)"),
        max_length=64,
        error_messages={
            "required": _("Enter the JAN code: the 13 (or 8) digits under the barcode."),
            "max_length": _("That is too long to be a JAN code."),
        },
        widget=forms.TextInput(
            {
                "placeholder": "4901234567894",
                "autocomplete": "off",
                "inputmode": "numeric",
                "spellcheck": "false",
            }
        ),
        help_text=_("13 or 8 digits, as printed under the barcode on the pack."),
    )

    def clean_jan(self) -> str:
        try:
            return parse_jan(self.cleaned_data["jan"])
        except IntakeError as error:
            raise forms.ValidationError(error.message, code=error.code) from None
