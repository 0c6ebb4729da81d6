"""End-user pages: thin views over the domain's plain functions."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from watches import search
from watches.charts import price_chart
from watches.history import load_points
from watches.models import Listing
from watches.triggers import LOW_WINDOW

PAGE_SIZE = 20


def home(request: HttpRequest) -> HttpResponse:
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
        },
    )


def listing_detail(request: HttpRequest, listing_id: int) -> HttpResponse:
    listing = get_object_or_404(Listing, pk=listing_id)
    now = timezone.now()
    points = load_points([listing.pk], now - LOW_WINDOW).get(listing.pk, [])
    chart = price_chart(points, now=now, low=listing.low_90, typical=listing.typical_price)
    return render(
        request,
        "watches/listing.html",
        {"listing": listing, "chart": chart, "nav": "listing"},
    )
