"""My watches: the device's live watches, and editing, pausing, resuming and removing one.

Every view resolves the device from its cookie; a watch of another device (or of none) is a
404, the same answer as a watch that does not exist. Changes are POST with CSRF, and come
back to the page with a message (no JavaScript needed).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from watches import devices
from watches.models import Watch
from watches.pages import watchlist
from watches.pages.forms import ProductWatchForm, WatchForm


@require_http_methods(["GET", "HEAD"])
def my_watches(request: HttpRequest) -> HttpResponse:
    device = devices.get_device(request)
    rows = watchlist.rows_for(list(watchlist.live_watches(device)), device)
    removed = _just_removed(request, device)
    return render(
        request,
        "watches/my_watches.html",
        {
            "nav": "watches",
            "device": device,
            "rows": rows,
            "removed": removed,
            "push_active": devices.push_active(device),
            "can_notify": watchlist.can_notify(device),
        },
    )


@require_http_methods(["GET", "HEAD", "POST"])
def edit_watch(request: HttpRequest, watch_id: int) -> HttpResponse:
    watch = devices.owned_or_404(
        request, Watch.live.select_related("listing", "product"), pk=watch_id
    )
    listing, product = watch.listing, watch.product

    def watch_form(*args, **kwargs) -> WatchForm:
        # A product watch offers the product's triggers, and compares across its offers.
        if product is not None:
            return ProductWatchForm(*args, product=product, **kwargs)
        return WatchForm(*args, listing=listing, **kwargs)

    if request.method == "POST":
        form = watch_form(request.POST)
        if form.is_valid():
            if not watchlist.change_watch(watch, form.params()):
                form.add_error(
                    "trigger",
                    _("You already have a watch of this kind on this item: edit that one instead."),
                )
            else:
                messages.success(
                    request, watchlist.saved_message(watch, watch.device, created=False)
                )
                return redirect(reverse("my-watches") + f"#watch-{watch.pk}")
    else:
        form = watch_form(initial=WatchForm.initial_for(watch))
    return render(
        request,
        "watches/edit_watch.html",
        {"nav": "watches", "watch": watch, "listing": listing, "form": form},
    )


@require_POST
def pause_watch(request: HttpRequest, watch_id: int) -> HttpResponse:
    watch = devices.owned_or_404(request, Watch.live.select_related("listing"), pk=watch_id)
    paused = request.POST.get("paused") != "0"
    watchlist.set_paused(watch, paused)
    if paused:
        messages.success(
            request,
            _("Paused: we will not tell you about %(name)s until you resume.")
            % {"name": watch.listing.name},
        )
    else:
        messages.success(
            request, _("Resumed: %(name)s is watched again.") % {"name": watch.listing.name}
        )
    return redirect(reverse("my-watches") + f"#watch-{watch.pk}")


@require_POST
def remove_watch(request: HttpRequest, watch_id: int) -> HttpResponse:
    watch = devices.owned_or_404(request, Watch.live.select_related("listing"), pk=watch_id)
    watchlist.remove_watch(watch)
    # The page offers an undo for this one watch (a form, so it works without JavaScript).
    return redirect(reverse("my-watches") + f"?removed={watch.pk}")


@require_POST
def restore_watch(request: HttpRequest, watch_id: int) -> HttpResponse:
    watch = devices.owned_or_404(
        request,
        Watch.objects.filter(removed_at__isnull=False).select_related("listing"),
        pk=watch_id,
    )
    if watchlist.restore_watch(watch):
        messages.success(
            request, _("Restored: %(name)s is watched again.") % {"name": watch.listing.name}
        )
    else:
        messages.error(
            request,
            _("You are already watching that item this way, so the old watch stays removed."),
        )
    return redirect(reverse("my-watches") + f"#watch-{watch.pk}")


def _just_removed(request: HttpRequest, device) -> Watch | None:
    """The watch named by ?removed=, when it is this device's and really removed."""
    raw = request.GET.get("removed", "")
    if device is None or not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        return None
    try:
        return devices.owned_or_404(
            request,
            Watch.objects.filter(removed_at__isnull=False).select_related("listing"),
            pk=int(raw),
        )
    except Http404:
        return None
