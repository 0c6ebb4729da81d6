"""Product pages: add a product by its JAN code, its page (every shop's offer, the cheapest
offer's history, the watch form), and a listing's way to its product. Thin: plain functions
do the work (`watches.products.intake`, `watches.products.watches`, `watches.products.offers`)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from watches import devices, throttle
from watches.intake import IntakeError
from watches.models import Listing, Product, Watch, unit_price
from watches.pages import watchlist
from watches.pages.charts import price_chart
from watches.pages.forms import AddByJanForm, ProductWatchForm
from watches.pages.views import ADD_PER_MINUTE, _render_home
from watches.polling.history import listing_stats
from watches.products.intake import add_product, product_from_listing
from watches.products.offers import product_points, rank
from watches.products.watches import offers_of, save_product_watch
from watches.triggers import LOW_WINDOW

# How an intake problem answers: the person typed a code no shop has, or we could not ask.
_INTAKE_STATUS = {"not_found": 404, "unreachable": 503, "no_source": 503, "no_jan": 400}


@dataclass(frozen=True)
class ProductFacts:
    """What the chart and the watch form read of a product, as they read a listing's: its
    cheapest offer's 90-day low and typical price, incl. shipping and after points."""

    name: str
    units_per_pack: int | None
    unit_label: str
    low_90: int | None
    typical_price: int | None
    low_90_net: int | None = None
    typical_net: int | None = None

    @property
    def unit_low_90(self) -> Decimal | None:
        return unit_price(self.low_90, self.units_per_pack)

    @property
    def unit_low_90_net(self) -> Decimal | None:
        return unit_price(self.low_90_net, self.units_per_pack)


@require_http_methods(["GET", "HEAD", "POST"])
def add_by_jan(request: HttpRequest) -> HttpResponse:
    """A JAN code, typed or scanned: the product's page, made on first need. Problems are
    told next to the field on the home page, with a 4xx (or 503) status."""
    if request.method != "POST":
        return redirect(reverse("home") + "#add-jan")
    form = AddByJanForm(request.POST)
    status = 400
    if form.is_valid():
        if not throttle.allow(request, "add-by-jan", ADD_PER_MINUTE):
            form.add_error(
                "jan", _("You added several items just now. Wait a minute and try again.")
            )
            status = 429
        else:
            try:
                product = add_product(form.cleaned_data["jan"])
            except IntakeError as error:
                form.add_error("jan", error.message)
                status = _INTAKE_STATUS.get(error.code, 400)
            else:
                return redirect("product", product.pk)
    return _render_home(request, jan_form=form, status=status)


@require_POST
def listing_product(request: HttpRequest, listing_id: int) -> HttpResponse:
    """From a listing whose JAN code is known to its product's page (every shop's offer)."""
    listing = get_object_or_404(Listing, pk=listing_id)
    back = reverse("listing", args=[listing.pk])
    if not throttle.allow(request, "add-by-jan", ADD_PER_MINUTE):
        message = _("You added several items just now. Wait a minute and try again.")
        return _problem(request, message, back, 429)
    try:
        product = product_from_listing(listing)
    except IntakeError as error:
        return _problem(request, error.message, back, _INTAKE_STATUS.get(error.code, 400))
    return redirect("product", product.pk)


def _problem(request: HttpRequest, message: str, back: str, status: int) -> HttpResponse:
    context = {"message": message, "back": back}
    return render(request, "watches/problem.html", context, status=status)


@require_http_methods(["GET", "HEAD", "POST"])
def product_detail(request: HttpRequest, product_id: int) -> HttpResponse:
    """Every shop's offer, cheapest first; the cheapest offer over 90 days; the watch form.
    POST creates the watch and comes back; an invalid form changes nothing (400)."""
    product = get_object_or_404(Product, pk=product_id)
    now = timezone.now()
    offers = offers_of(product)
    status = 200
    if request.method == "POST":
        form = ProductWatchForm(request.POST, product=product)
        if not offers:
            form.add_error(None, _("No shop offers this product now, so it cannot be watched."))
        if offers and form.is_valid():
            device = devices.get_or_create_device(request)
            watch, created = save_product_watch(device, product, form.params())
            messages.success(request, watchlist.saved_message(watch, device, created=created))
            return redirect(reverse("product", args=[product.pk]) + "#your-watches")
        status = 400
    else:
        form = ProductWatchForm(product=product)
    since = now - LOW_WINDOW
    points = product_points([product.pk], since)[product.pk]
    nets = product_points([product.pk], since, after_points=True)[product.pk]
    typical, low = listing_stats(points, now)
    typical_net, low_net = listing_stats(nets, now)
    facts = ProductFacts(
        product.name,
        product.units_per_pack,
        product.unit_label,
        low,
        typical,
        low_net,
        typical_net,
    )
    device = devices.get_device(request)
    mine = (
        list(
            Watch.live.filter(device=device, product=product)
            .select_related("listing")
            .order_by("created_at")
        )
        if device
        else []
    )
    in_stock = sorted((o for o in offers if o.in_stock and o.price is not None), key=rank)
    out = [o for o in offers if o not in in_stock]
    return render(
        request,
        "watches/product.html",
        {
            "nav": "listing",
            "product": product,
            "listing": facts,
            "offers": [*in_stock, *out],
            "best": in_stock[0] if in_stock else None,
            "shops": len(in_stock),
            "chart": price_chart(points, now=now, low=low, typical=typical, net_points=nets),
            "form": form,
            "action": "#watch",
            "submit_label": _("Watch every shop"),
            "mine": watchlist.rows_for(mine, device, now),
            "device": device,
            "push_active": devices.push_active(device),
        },
        status=status,
    )
