"""End-user pages: thin views over the domain's plain functions."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from watches import devices, intake, throttle
from watches.models import Device, Listing, PricePoint, Product, Watch
from watches.pages import pagecache, results, watchlist
from watches.pages.charts import price_chart
from watches.pages.forms import AddByJanForm, AddByLinkForm, WatchForm
from watches.pages.pagecache import CSRF_PLACEHOLDER
from watches.polling.history import load_both, newest_point_at
from watches.products import intake as product_intake
from watches.products.jan import is_jan, typed_jan
from watches.search import near
from watches.search import query as search
from watches.templatetags.yasugoro import when
from watches.triggers import LOW_WINDOW

PAGE_SIZE = 20
MAX_ID = 2**63 - 1  # the largest id a BigAutoField (and SQLite's integer) holds
# What only a listing's facts and chart show (`_listing_main`), which every poll may change;
# the rest of its page (`_frame_fields`) is cached apart, with this in place of them.
FACTS_ONLY = frozenset(
    {
        "price",
        "shipping",
        "in_stock",
        "typical_price",
        "typical_net",
        "points",
        "points_until",
        "points_after",
        "point_rate",
        "member_points",
        "last_polled_at",
        "last_error",
        "last_error_at",
        "search_text",  # shown nowhere
    }
)
MAIN_PLACEHOLDER = "listing-facts-and-chart-placeholder"
# What `watches/_listing_facts.html` shows, and is cached under.
FACT_FIELDS = (
    "price",
    "shipping",
    "in_stock",
    "units_per_pack",
    "unit_label",
    "low_90",
    "typical_price",
    "low_90_net",
    "typical_net",
    "points",
    "points_until",
    "points_after",
    "point_rate",
    "member_points",
    "url",
    # Whether its points campaign is still on: the facts say "until 3/19 13:59", then not.
    "campaign_on",
)
# The home page's query parameters when browsing (a search, `q`, is rendered every time).
BROWSE_PARAMS = ("category", "page")
# Adding by link asks a marketplace about a new item: a few a minute per address is plenty
# for a person and keeps the page from being a way to hammer the marketplace through us.
ADD_PER_MINUTE = 10


@require_http_methods(["GET", "HEAD"])
def home(request: HttpRequest) -> HttpResponse:
    jan = typed_jan(request.GET.get("q", ""))
    if jan is not None:
        # A JAN code in the search box: its product when we know it, else the JAN form,
        # filled in (and its problem said, when the code is not a valid one).
        product = Product.objects.filter(jan=jan).first()
        if product is not None:
            return redirect("product", product.pk)
        form = AddByJanForm(initial={"jan": jan}) if is_jan(jan) else AddByJanForm({"jan": jan})
        return _render_home(request, jan_form=form)
    if pagecache.shared(request, BROWSE_PARAMS):
        # Browsing says nothing personal: the whole page is cached until prices change.
        return pagecache.page(
            request,
            "home",
            (),
            lambda csrf_token: _home_html(request, AddByLinkForm(), csrf_token),
        )
    return _render_home(request)


def _render_home(
    request: HttpRequest,
    add_form: AddByLinkForm | None = None,
    status: int = 200,
    *,
    jan_form: AddByJanForm | None = None,
) -> HttpResponse:
    html = _home_html(request, add_form or AddByLinkForm(), get_token(request), jan_form=jan_form)
    return HttpResponse(html, status=status)


def _home_html(
    request: HttpRequest,
    add_form: AddByLinkForm,
    csrf_token: str,
    *,
    jan_form: AddByJanForm | None = None,
) -> str:
    jan_form = jan_form or AddByJanForm()
    query = search.normalise(request.GET.get("q", ""))
    category = request.GET.get("category", "")[:100]
    page_number = _page_number(request.GET.get("page"))
    jan = typed_jan(query)
    if query:
        # Searches vary without end: rendered each time (the index makes them cheap).
        chips = _chips(query, category)
        results = _results(query, category, page_number, jan=jan)
    else:
        # Browsing is the same for everyone: cached per language until prices change.
        chips = pagecache.fragment("chips", (category,), lambda: _chips("", category))
        results = pagecache.fragment(
            "results", (category, page_number), lambda: _results("", category, page_number)
        )
    if add_form.is_bound:
        add_field = render_to_string("watches/_field.html", {"field": add_form["link"]})
    else:
        add_field = pagecache.fragment(
            "add-field",
            (),
            lambda: render_to_string("watches/_field.html", {"field": add_form["link"]}),
        )
    return render_to_string(
        "watches/home.html",
        {
            "nav": "home",
            "query": query,
            "category": category,
            "chips_html": chips,
            "results_html": results,
            "add_form": add_form,
            "add_field_html": add_field,
            "csrf_token": csrf_token,
            "jan_form": jan_form,
            "jan_typed": jan is not None,
        },
        request=request,
    )


def _chips(query: str, category: str) -> str:
    context = {"query": query, "category": category, "categories": search.categories()}
    return render_to_string("watches/_chips.html", context)


def _results(query: str, category: str, page_number: int, *, jan: str | None = None) -> str:
    more, suggestion = False, None
    if query:
        found = search.search_results(query, category)
        if not found.found and jan is None:
            # Nothing: perhaps a near miss ("did you mean"), whose results are shown instead.
            suggestion = near.suggest(query, category)
            if suggestion is not None:
                found = search.search_results(suggestion.query, category)
        listings, more = found.listings, found.more
    else:
        listings = search.search("", category)
    page = Paginator(listings, PAGE_SIZE).get_page(page_number)
    browsing = bool(query or category)
    cheap = [] if browsing or page.number > 1 else search.cheap_now()
    # One query for the offers of every product on the page and in "cheap right now".
    page_rows, cheap_rows = results.rows(page, cheap)
    context = {
        "query": query,
        "category": category,
        "page": page,
        "rows": page_rows,
        "more": more,
        "cheap": cheap_rows,
        "jan": jan,
        "suggestion": suggestion,
        "suggestion_link": _search_link(suggestion.query, category) if suggestion else "",
    }
    return render_to_string("watches/_results.html", context)


def _search_link(query: str, category: str) -> str:
    params = {"q": query, **({"category": category} if category else {})}
    return format_html('<a href="{}?{}">{}</a>', reverse("home"), urlencode(params), query)


def _page_number(raw: str | None) -> int:
    """The page asked for, as a number the paginator then bounds (so a cache key cannot be
    made of arbitrary text)."""
    if raw and raw.isascii() and raw.isdigit() and len(raw) <= 6:
        return max(int(raw), 1)
    return 1


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
                found = product_intake.add_by_link(form.ref)
            except intake.IntakeError as error:
                form.add_error("link", error.message)
            else:
                if isinstance(found, Product):
                    return redirect("product", found.pk)
                return redirect("listing", found.pk)
    return _render_home(request, form)


@require_http_methods(["GET", "HEAD", "POST"])
def listing_detail(request: HttpRequest, listing_id: int) -> HttpResponse:
    """The listing, its price history and the watch form. POST creates the watch (and the
    device, on first need) and comes back here; an invalid form changes nothing."""
    if listing_id > MAX_ID:
        # No such row can exist, and the written-out query below would overflow on it.
        raise Http404
    if request.method != "POST":
        shared = _shared_listing_page(request, listing_id)
        if shared is not None:
            return shared
    listing = get_object_or_404(Listing, pk=listing_id)
    if request.method == "POST":
        form = WatchForm(request.POST, listing=listing)
        if listing.paused:
            form.add_error(None, _("We no longer track this item, so it cannot be watched."))
        elif form.is_valid():
            params = form.params()
            owner = devices.get_or_create_device(request)
            watch, created = watchlist.save_watch(owner, listing, params)
            messages.success(request, watchlist.saved_message(watch, owner, created=created))
            return redirect(reverse("listing", args=[listing.pk]) + "#your-watches")
    else:
        form = WatchForm(listing=listing)
    now = timezone.now()
    device = devices.get_device(request)
    # This listing's own watches; a product watch that follows it as the best offer at the
    # last poll is the product's, at any shop, and is shown as such.
    mine = (
        list(Watch.live.filter(device=device, listing=listing).order_by("created_at"))
        if device
        else []
    )
    return HttpResponse(
        _listing_html(request, listing, form, device, mine, now, get_token(request))
    )


def _shared_listing_page(request: HttpRequest, listing_id: int) -> HttpResponse | None:
    """The listing page as every browser without a device gets it (a first visit: nothing
    personal on it), cached whole until this listing changes — or None when this request's
    page is its own (a device, whose watches it may show; a message waiting; a URL of its
    own)."""
    if not pagecache.shared(request) or devices.get_device(request) is not None:
        return None

    def render(csrf_token: str) -> str:
        listing = _listing_or_404(listing_id)
        now = timezone.now()
        # A poll changes only the facts and the chart: the rest of the page (the frame) is
        # cached under the listing's other fields, so the page after a poll costs about
        # what its facts do.
        frame = pagecache.fragment(
            "listing-frame",
            (*_frame_fields(listing), request.get_full_path()),
            lambda: _listing_html(
                request, listing, WatchForm(listing=listing), None, [], now, csrf_token,
                main=MAIN_PLACEHOLDER,
            ),
            pagecache.PURE,
        )  # fmt: skip
        return frame.replace(MAIN_PLACEHOLDER, _listing_main(listing, now))

    # No query when cached: observing, saving, pausing or deleting a listing moves its own
    # version on; another listing's new price leaves this page as it is.
    version = pagecache.listing_version(listing_id)
    return pagecache.page(request, "listing", (listing_id,), render, version)


def _listing_or_404(listing_id: int) -> Listing:
    return get_object_or_404(Listing, pk=listing_id)


def _frame_fields(listing: Listing) -> tuple:
    """What the listing page shows of the listing outside its facts and chart."""
    return tuple(
        getattr(listing, field.attname)
        for field in Listing._meta.concrete_fields
        if field.name not in FACTS_ONLY
    )


def _listing_html(
    request: HttpRequest,
    listing: Listing,
    form: WatchForm,
    device: Device | None,
    mine: list[Watch],
    now: dt.datetime,
    csrf_token: str,
    main: str | None = None,
) -> str:
    """The listing page; `main` in place of its facts and chart when given."""
    if mine:
        first_seen = (
            PricePoint.objects.filter(listing=listing, observed_at__gte=now - LOW_WINDOW)
            .order_by("observed_at")
            .values_list("observed_at", flat=True)
            .first()
        )
        for watch in mine:
            # Already at hand: no query per watch.
            watch.listing = listing
            # What `watchlist.live_watches` annotates, read by name (`watchlist.rows_for`).
            setattr(watch, "first_seen", first_seen)  # noqa: B010
    if main is None:
        main = _listing_main(listing, now, watchlist.chart_target(listing, mine))
    if form.is_bound:
        watch_form = _watch_form(listing, form, csrf_token)
    else:
        # The empty form shows only the 90-day low and the pack size (and the language): cached
        # under them, shared by every listing alike and never stale.
        watch_form = pagecache.fragment(
            "watch-form",
            (
                listing.low_90,
                listing.low_90_net,
                listing.units_per_pack,
                listing.unit_label,
                listing.gives_points,
            ),
            lambda: _watch_form(listing, form, CSRF_PLACEHOLDER),
            pagecache.PURE,
        ).replace(CSRF_PLACEHOLDER, csrf_token)
    return render_to_string(
        "watches/listing.html",
        {
            "listing": listing,
            "main_html": main,
            "watch_form_html": mark_safe(watch_form),  # noqa: S308 (our own rendered template)
            "nav": "listing",
            "form": form,
            "mine": watchlist.rows_for(
                [watch for watch in mine if watch.product_id is None], device, now
            ),
            "product_watches": watchlist.rows_for(
                [watch for watch in mine if watch.product_id is not None], device, now
            ),
            "device": device,
            "push_active": devices.push_active(device),
            "csrf_token": csrf_token,
        },
        request=request,
    )


def _listing_main(listing: Listing, now, target=None) -> str:
    """The listing's facts and its 90-day chart (with `target` as the device's line)."""
    # A poll that finds the same price and stock changes only the time of the last check:
    # the facts are cached under what they show.
    facts = pagecache.fragment(
        "listing-facts",
        tuple(getattr(listing, name) for name in FACT_FIELDS),
        lambda: render_to_string("watches/_listing_facts.html", {"listing": listing}),
        pagecache.PURE,
    )
    if target is None:
        # Most polls add no point (only a change, or the first in POLL_HISTORY_MIN_MINUTES,
        # does): without a target the chart is cached under what it is drawn from — the
        # newest point, the low and typical lines — and outlives the listing's version.
        parts = (listing.pk, newest_point_at(listing.pk), listing.low_90, listing.typical_price)
        chart = pagecache.fragment(
            "chart", parts, lambda: _chart_html(listing, now), pagecache.PURE
        )
    else:
        chart = _chart_html(listing, now, target)
    # Put together here rather than by a template: after a poll that found the same price
    # this is all of the page that is rendered, and a template cost more than the rest.
    return format_html(
        '<div class="listing-main">\n  {}\n  <h2>{}</h2>\n  {}\n  {}\n</div>',
        facts,
        _("Price history"),
        chart,
        _last_check(listing),
    )


def _last_check(listing: Listing) -> str:
    """When the price shown was last checked. `last_polled_at` is when the marketplace was
    last asked, answered or not: after a failed ask (`last_error`) the price is an earlier
    check's, and its newest point says only when it was seen at the latest — an unchanged
    price is kept as a point only now and then (POLL_HISTORY_MIN_MINUTES)."""
    if not listing.last_polled_at:
        return ""
    at = when(listing.last_polled_at)
    if not listing.last_error:
        return format_html('<p class="unit">{}</p>', _("Price last checked %(at)s.") % {"at": at})
    seen = newest_point_at(listing.pk) if listing.price is not None else None
    if seen is None:
        text = _("The last price check, %(at)s, failed.") % {"at": at}
    else:
        text = _(
            "The last price check, %(at)s, failed. The price shown is from an earlier check, "
            "made %(seen)s or later."
        ) % {"at": at, "seen": when(seen)}
    return format_html('<p class="unit up">{}</p>', text)


def _chart_html(listing: Listing, now: dt.datetime, target=None) -> SafeString:
    totals, nets = load_both([listing.pk], now - LOW_WINDOW)
    chart = price_chart(
        totals.get(listing.pk, []),
        now=now,
        low=listing.low_90,
        typical=listing.typical_price,
        target=target,
        net_points=nets.get(listing.pk, []),
    )
    return render_to_string("watches/_price_chart.html", {"listing": listing, "chart": chart})


def _watch_form(listing: Listing, form: WatchForm, csrf_token: str) -> str:
    context = {
        "listing": listing,
        "form": form,
        "action": "#watch",
        "submit_label": _("Watch"),
        "csrf_token": csrf_token,
    }
    return render_to_string("watches/_watch_form.html", context)
