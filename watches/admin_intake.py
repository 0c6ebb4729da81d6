"""Admin: add a listing by item code or URL; the first fetch fills the rest.

A mixin for the Listing admin, kept apart from `watches/admin.py` so the admin itself can
change freely around it. Only the *add* view differs; the change view is untouched.
"""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from watches.intake import IntakeError, fetch_first, parse_item_ref, save_listing
from watches.models import Listing


class ListingIntakeForm(forms.ModelForm):
    """Item code or URL, plus what the marketplace cannot tell (units per pack)."""

    code_or_url = forms.CharField(
        label=_("Item code or URL"),
        max_length=2000,
        help_text=_(
            "A Rakuten Ichiba item URL (https://item.rakuten.co.jp/shop/item/), a Rakuten "
            "item code (shop:item) or a demo product code."
        ),
    )

    class Meta:
        model = Listing
        fields = ("units_per_pack", "unit_label", "category")

    def clean(self):
        cleaned = super().clean()
        text = cleaned.get("code_or_url")
        if not text:
            return cleaned
        try:
            ref = parse_item_ref(text)
            existing = Listing.objects.filter(source=ref.source, item_code=ref.item_code).first()
            if existing is not None:
                raise IntakeError(
                    _("%(listing)s is already tracked.") % {"listing": existing}, code="exists"
                )
            self.ref, self.observation = ref, fetch_first(ref)
        except IntakeError as error:
            self.add_error("code_or_url", error.message)
        return cleaned

    def save(self, commit: bool = True) -> Listing:
        listing = save_listing(
            self.ref,
            self.observation,
            units_per_pack=self.cleaned_data.get("units_per_pack"),
            unit_label=self.cleaned_data.get("unit_label") or "",
            category=self.cleaned_data.get("category") or "",
        )
        self.instance = listing
        # What admin calls after save(commit=False); none here. Django's own save() sets this
        # attribute the same way; django-stubs declares it a method.
        self.save_m2m = lambda: None  # type: ignore[method-assign]
        return listing


class ListingIntakeAdminMixin:
    """For a ModelAdmin of Listing: the add form takes a code or URL."""

    add_form = ListingIntakeForm
    add_fieldsets = (
        (None, {"fields": ("code_or_url", "units_per_pack", "unit_label", "category")}),
    )

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return self.add_fieldsets
        return super().get_fieldsets(request, obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, change, **kwargs)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if object_id is None and request.method == "POST":
            # The add form asks the marketplace while it validates, and Django wraps this
            # view in a transaction: no network call may happen inside one (on SQLite it
            # would hold the write lock for the whole request). Intake writes in its own
            # short transaction.
            return self._changeform_view(request, object_id, form_url, extra_context)
        return super().changeform_view(request, object_id, form_url, extra_context)
