"""The real URLconf plus the bench's own views: `/bench/minimal`, the least a Django view can
do on the same server, through the same middleware — the baseline of the pages benchmark;
and a listing's page and a product's as a visitor meets them when the cache cannot serve them
(bench only; never in yasugoro.urls)."""

import secrets
from unittest import mock

from django.http import HttpResponse
from django.urls import include, path

from watches.pages import pagecache
from watches.pages.products import product_detail
from watches.pages.views import listing_detail


def minimal(request):
    return HttpResponse("ok", content_type="text/plain")


def observed_listing(request, listing_id: int):
    """The listing page as the first visit after a poll of its listing gets it: its version
    has moved on (here for every request; the poll's write of it is not charged to the
    page), so the page is rendered again, with what a poll does not change (the frame, the
    chart when the poll added no point) from the cache, and kept."""
    with mock.patch.object(pagecache, "listing_version", lambda listing_id: secrets.randbits(63)):
        return listing_detail(request, listing_id)


def uncached_listing(request, listing_id: int):
    """The listing page with the page cache off: every fragment rendered, nothing stored."""

    def render(name, parts, render, version=None):
        return render()

    with mock.patch.object(pagecache, "_cached", render):
        return listing_detail(request, listing_id)


def observed_product(request, product_id: int):
    """The product page as the first visit after a poll of its offers gets it: its version
    has moved on (for every request), so the page is put together again, with what a poll
    does not change (the frame, the chart and its figures while no point was added, the form,
    the main column but for the times of the checks) from the cache."""

    def version(product_id, offer_ids):
        return secrets.token_hex(12)

    with mock.patch.object(pagecache, "product_version", version):
        return product_detail(request, product_id)


def uncached_product(request, product_id: int):
    """The product page with the page cache off: every part rendered, nothing stored."""

    def compute(name, parts, compute, version=None):
        return compute()

    with mock.patch.object(pagecache, "_cached", compute):
        return product_detail(request, product_id)


urlpatterns = [
    path("bench/minimal", minimal),
    path("bench/observed/listings/<int:listing_id>/", observed_listing),
    path("bench/uncached/listings/<int:listing_id>/", uncached_listing),
    path("bench/observed/products/<int:product_id>/", observed_product),
    path("bench/uncached/products/<int:product_id>/", uncached_product),
    path("", include("yasugoro.urls")),
]
