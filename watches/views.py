"""End-user pages: thin views over the domain's plain functions."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from watches import devices, intake, search, throttle, watchlist
from watches.charts import price_chart
from watches.forms import AddByLinkForm, WatchForm
from watches.history import load_points
from watches.models import Listing, Watch
from watches.triggers import LOW_WINDOW

PAGE_SIZE = 20
# Adding by link asks a marketplace about a new item: a few a minute per address is plenty
# for a person and keeps the page from being a way to hammer the marketplace through us.
ADD_PER_MINUTE = 10


@require_http_methods(["GET", "HEAD"])
def home(request: HttpRequest) -> HttpResponse:
    return _render_home(request, AddByLinkForm())


def _render_home(request: HttpRequest, add_form: AddByLinkForm, status: int = 200) -> HttpResponse:
    query = search.normalise(request.GET.get("q", ""))
    category = request.GET.get("category", "")[:100]
    listings = search.search(query, category)
    page = Paginator(listings, PAGE_SIZE).get_page(request.GET.get("page"))
    browsing = bool(query or category)
    return render(
        request,
        "watches/home.html",
        {
            "nav": "home",
            "query": query,
            "category": category,
            "categories": search.categories(),
            "page": page,
            "cheap": [] if browsing or page.number > 1 else list(search.cheap_now()),
            "add_form": add_form,
        },
    )


@require_http_methods(["GET", "HEAD", "POST"])
def add_by_link(request: HttpRequest) -> HttpResponse:
    """Paste a marketplace item URL or code: parse it (never fetch it), ask the marketplace
    through its adapter, and open the listing page. Problems are told next to the field, on
    the home page rendered here; a GET (say, the language switch coming back) goes home."""
    if request.method != "POST":
        return redirect(reverse("home") + "#add")
    form = AddByLinkForm(request.POST)
    if form.is_valid():
        if not throttle.allow(request, "add-by-link", ADD_PER_MINUTE):
            form.add_error(
                "link", _("You added several items just now. Wait a minute and try again.")
            )
        else:
            try:
                listing = intake.find_or_add(form.ref)
            except intake.IntakeError as error:
                form.add_error("link", error.message)
            else:
                return redirect("listing", listing.pk)
    return _render_home(request, form)


@require_http_methods(["GET", "HEAD", "POST"])
def listing_detail(request: HttpRequest, listing_id: int) -> HttpResponse:
    """The listing, its price history and the watch form. POST creates the watch (and the
    device, on first need) and comes back here; an invalid form changes nothing."""
    listing = get_object_or_404(Listing, pk=listing_id)
    if request.method == "POST":
        form = WatchForm(request.POST, listing=listing)
        if listing.paused:
            form.add_error(None, _("We no longer track this item, so it cannot be watched."))
        elif form.is_valid():
            params = form.params()
            device = devices.get_or_create_device(request)
            _watch, created = watchlist.save_watch(device, listing, params)
            if created:
                messages.success(
                    request, _("Watching. We check the price again before we tell you.")
                )
            else:
                messages.success(request, _("Your watch on this item is updated."))
            return redirect(reverse("listing", args=[listing.pk]) + "#your-watches")
    else:
        form = WatchForm(listing=listing)
    now = timezone.now()
    points = load_points([listing.pk], now - LOW_WINDOW).get(listing.pk, [])
    device = devices.get_device(request)
    mine = (
        list(Watch.live.filter(device=device, listing=listing).order_by("created_at"))
        if device
        else []
    )
    for watch in mine:
        # Already at hand: no query per watch.
        watch.listing = listing
        watch.first_seen = points[0].observed_at if points else None
    chart = price_chart(
        points,
        now=now,
        low=listing.low_90,
        typical=listing.typical_price,
        target=watchlist.chart_target(listing, mine),
    )
    return render(
        request,
        "watches/listing.html",
        {
            "listing": listing,
            "chart": chart,
            "nav": "listing",
            "form": form,
            "mine": watchlist.rows_for(mine, now, can_notify=bool(device and device.can_receive)),
            "device": device,
            "push_active": devices.push_active(device),
        },
    )
