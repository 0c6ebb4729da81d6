"""Product pages: add a product by its JAN code, its page (every shop's offer, the cheapest
offer's history, the watch form), and a listing's way to its product. Thin: plain functions
do the work (`watches.products.intake`, `watches.products.watches`, `watches.products.offers`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from watches import devices, throttle
from watches.intake import IntakeError
from watches.models import Device, Listing, Product, Watch, unit_price
from watches.pages import pagecache, watchlist
from watches.pages.charts import price_chart
from watches.pages.forms import AddByJanForm, ProductWatchForm
from watches.pages.pagecache import CSRF_PLACEHOLDER
from watches.pages.views import ADD_PER_MINUTE, MAX_ID, _render_home
from watches.polling.history import listing_stats
from watches.products.intake import add_product, product_from_listing
from watches.products.offers import (
    in_stock,
    offers_with_newest_point,
    on_products_pack,
    product_points,
    rank,
)
from watches.products.watches import save_product_watch
from watches.templatetags.yasugoro import when
from watches.triggers import LOW_WINDOW

MAIN_PLACEHOLDER = "product-main-column-placeholder"
# The product row's own columns: its page is cached under them (and its offers' versions).
PRODUCT_FIELDS = tuple(field.attname for field in Product._meta.concrete_fields)
# What an offer's card shows (`watches/_product_main.html`) but the time of its last check.
OFFER_FIELDS = (
    "pk",
    "source",
    "item_code",
    "shop_name",
    "url",
    "price",
    "shipping",
    "in_stock",
    "units_per_pack",
    "unit_label",
    "points",
    "points_until",
    "points_after",
    "point_rate",
    "member_points",
    # Whether its points campaign is still on: the breakdown says "until 3/19 13:59", then not.
    "campaign_on",
)
# Put where a time of a check goes (`%d`: the offer's id, 0 the product's).
CHECKED_PLACEHOLDER = "checked-at-placeholder-%d"
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
    if product_id > MAX_ID:
        raise Http404
    if request.method != "POST":
        shared = _shared_product_page(request, product_id)
        if shared is not None:
            return shared
    product = get_object_or_404(Product, pk=product_id)
    offers = offers_with_newest_point(product)
    status = 200
    if request.method == "POST":
        form = ProductWatchForm(request.POST, product=product)
        if not any(not offer.paused for offer in offers):
            form.add_error(None, _("No shop offers this product now, so it cannot be watched."))
        elif form.is_valid():
            owner = devices.get_or_create_device(request)
            watch, created = save_product_watch(owner, product, form.params())
            messages.success(request, watchlist.saved_message(watch, owner, created=created))
            return redirect(reverse("product", args=[product.pk]) + "#your-watches")
        status = 400
    else:
        form = ProductWatchForm(product=product)
    now = timezone.now()
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
    html = _product_html(request, product, offers, form, device, mine, now, get_token(request))
    return HttpResponse(html, status=status)


def _shared_product_page(request: HttpRequest, product_id: int) -> HttpResponse | None:
    """The product page as every browser without a device gets it, cached whole until the
    product or one of its offers changes — or None when this request's page is its own (as
    for a listing's page: `watches.pages.views._shared_listing_page`)."""
    if not pagecache.shared(request) or devices.get_device(request) is not None:
        return None

    def offer_ids() -> list[int]:
        offers = Listing.objects.filter(product_id=product_id).order_by("pk")
        return list(offers.values_list("pk", flat=True))

    # No query when cached: the product's own change, a listing joining it, and an offer
    # observed, saved, paused or deleted move this on.
    version = pagecache.product_version(product_id, offer_ids)

    def render(csrf_token: str) -> str:
        product = get_object_or_404(Product, pk=product_id)
        offers = offers_with_newest_point(product)
        now = timezone.now()
        history = _history(product, offers, now)
        # What a poll changes — the prices, the offers' times — is the main column: the rest
        # of the page is cached under the product's fields and its 90-day low (the form's).
        frame = pagecache.fragment(
            "product-frame",
            (*_product_fields(product), history.low, request.get_full_path()),
            lambda: _product_html(
                request, product, offers, ProductWatchForm(product=product), None, [], now,
                csrf_token, history=history, main=MAIN_PLACEHOLDER,
            ),
            pagecache.PURE,
        )  # fmt: skip
        return frame.replace(MAIN_PLACEHOLDER, _product_main(product, offers, history))

    return pagecache.page(request, "product", (product_id,), render, version)


@dataclass(frozen=True)
class ProductHistory:
    """The product's price over 90 days (its cheapest offer in stock at each moment): the
    figures the page shows, and its chart."""

    typical: int | None
    low: int | None
    chart_html: str
    typical_net: int | None = None
    low_net: int | None = None


def _history(product: Product, offers: list[Listing], now: dt.datetime) -> ProductHistory:
    """Read and drawn once per change of the offers' histories: cached under each offer's
    newest point, which moves only when a point is added (most polls add none)."""

    def compute() -> ProductHistory:
        since = now - LOW_WINDOW
        points = product_points([product.pk], since)[product.pk]
        nets = product_points([product.pk], since, after_points=True)[product.pk]
        typical, low = listing_stats(points, now)
        typical_net, low_net = listing_stats(nets, now)
        history = ProductHistory(typical, low, "", typical_net, low_net)
        chart = price_chart(points, now=now, low=low, typical=typical, net_points=nets)
        context = {"listing": _facts(product, history), "chart": chart}
        html = render_to_string("watches/_price_chart.html", context)
        return ProductHistory(typical, low, html, typical_net, low_net)

    # `newest_point_at` is annotated by offers_with_newest_point.
    marks = tuple((offer.pk, offer.newest_point_at) for offer in offers)  # type: ignore[attr-defined]
    return pagecache.value("product-history", (product.pk, marks), compute, pagecache.PURE)


def _facts(product: Product, history: ProductHistory) -> ProductFacts:
    return ProductFacts(
        product.name,
        product.units_per_pack,
        product.unit_label,
        history.low,
        history.typical,
        history.low_net,
        history.typical_net,
    )


def _product_fields(product: Product) -> tuple:
    """Everything the page shows of the product row itself."""
    return tuple(getattr(product, name) for name in PRODUCT_FIELDS)


def _product_html(
    request: HttpRequest,
    product: Product,
    offers: list[Listing],
    form: ProductWatchForm,
    device: Device | None,
    mine: list[Watch],
    now: dt.datetime,
    csrf_token: str,
    *,
    history: ProductHistory | None = None,
    main: str | None = None,
) -> str:
    """The product page; `main` in place of its main column (prices, offers, chart) when
    given."""
    history = history or _history(product, offers, now)
    facts = _facts(product, history)
    if main is None:
        main = _product_main(product, offers, history)
    if form.is_bound:
        watch_form = _watch_form(facts, form, csrf_token)
    else:
        # The empty form shows only the 90-day lows and the pack size (and the language).
        watch_form = pagecache.fragment(
            "product-watch-form",
            (
                history.low,
                history.low_net,
                product.units_per_pack,
                product.unit_label,
                "after_points" in form.fields,  # a shop that gives points offers it
            ),
            lambda: _watch_form(facts, form, CSRF_PLACEHOLDER),
            pagecache.PURE,
        ).replace(CSRF_PLACEHOLDER, csrf_token)
    return render_to_string(
        "watches/product.html",
        {
            "nav": "listing",
            "product": product,
            "main_html": mark_safe(main),  # noqa: S308 (our own rendered template)
            "watch_form_html": mark_safe(watch_form),  # noqa: S308 (our own rendered template)
            "form": form,
            "mine": watchlist.rows_for(mine, device, now),
            "device": device,
            "push_active": devices.push_active(device),
            "csrf_token": csrf_token,
        },
        request=request,
    )


def _product_main(product: Product, offers: list[Listing], history: ProductHistory) -> str:
    """The main column: the cheapest offer now, every shop's offer (cheapest first, those
    out of stock after), the chart. Each offer is priced per unit on the product's pack."""
    tracked = [on_products_pack(offer, product) for offer in offers if not offer.paused]
    available = sorted(in_stock(tracked), key=rank)
    ordered = [*available, *(offer for offer in tracked if offer not in available)]
    best = available[0] if available else None
    context = {
        "product": product,
        # Each with the placeholder of the time of its check.
        "offers": [(offer, CHECKED_PLACEHOLDER % offer.pk) for offer in ordered],
        "best": best,
        "shops": len(available),
        "chart_html": mark_safe(history.chart_html),  # noqa: S308 (our own rendered template)
        "product_checked": CHECKED_PLACEHOLDER % 0,
    }
    # A poll that finds the same prices changes only the times of the checks: the column is
    # cached under everything else it shows, and the times are put in afterwards.
    shown = (
        *(getattr(product, name) for name in PRODUCT_FIELDS if name != "last_polled_at"),
        product.last_polled_at is None,
        tuple(
            (
                *(getattr(offer, name) for name in OFFER_FIELDS),
                offer.last_polled_at is None,
                bool(offer.last_error),  # a failed check is said as such
            )
            for offer in ordered
        ),
        history.chart_html,
    )
    html: str = pagecache.fragment(
        "product-main",
        shown,
        lambda: render_to_string("watches/_product_main.html", context),
        pagecache.PURE,
    )
    times = {CHECKED_PLACEHOLDER % offer.pk: offer.last_polled_at for offer in ordered}
    times[CHECKED_PLACEHOLDER % 0] = product.last_polled_at
    for placeholder, at in times.items():
        if at is not None:
            html = html.replace(placeholder, escape(when(at)))
    return html


def _watch_form(facts: ProductFacts, form: ProductWatchForm, csrf_token: str) -> str:
    context = {
        "listing": facts,
        "form": form,
        "action": "#watch",
        "submit_label": _("Watch every shop"),
        "csrf_token": csrf_token,
    }
    return render_to_string("watches/_watch_form.html", context)
