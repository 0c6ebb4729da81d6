"""The device's own pages and JSON endpoints: settings (push on/off, move to another browser,
delete my data) and the push subscription API that static/js/push.js and the service worker
call. Thin: each view parses the request and calls watches.devices / watches.subscriptions.

Every view resolves the device from its cookie and touches nothing else; what the device does
not own is a 404.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views import i18n
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from watches import devices, throttle
from watches.models import Device, NotifyVia, Watch
from watches.pages.forms import EmailAddressForm, NotifyViaForm, PointsForm, QuietHoursForm
from watches.subscriptions import (
    InvalidSubscription,
    check_declared_size,
    clear_subscription,
    parse_json_body,
    parse_subscription,
    save_subscription,
)

# The header the service worker sets on /push/resubscribe (see `push_resubscribe`).
WORKER_HEADER = "X-Yasugoro-Push"
# The transfer pages carry a token in their URL (or body). `same-origin`: the token never
# leaves in a Referer to another site, while our own forms keep a real Origin — under
# `no-referrer` Chromium sends `Origin: null`, which the CSRF check rightly refuses.
TRANSFER_REFERRER_POLICY = "same-origin"
# A browser subscribes once, and again when its subscription rotates: more than this from one
# address in a minute is a script making devices.
SUBSCRIBE_PER_MINUTE = 10


# --- Pages --------------------------------------------------------------------------------


@require_safe
def settings_page(request: HttpRequest) -> HttpResponse:
    return render_settings(request, devices.get_device(request))


@require_http_methods(["GET", "HEAD", "POST"])
def create_transfer(request: HttpRequest) -> HttpResponse:
    """POST makes a one-time link to move this device to another browser. The link is shown
    on this response only: the database keeps just its hash. A GET (the language switch
    coming back to this page, a reload) goes to the settings page and makes nothing."""
    if request.method != "POST":
        return redirect(reverse("device-settings") + "#move-h")
    device = devices.get_device(request)
    if device is None:
        messages.info(request, _("This browser has nothing to move yet."))
        return redirect("device-settings")
    token = devices.create_transfer_link(device)
    link = request.build_absolute_uri(reverse("device-transfer", args=[token]))
    response = render_settings(request, device, transfer_link=link)
    response.headers["Referrer-Policy"] = TRANSFER_REFERRER_POLICY
    return response


@require_http_methods(["GET", "POST"])
def transfer(request: HttpRequest, token: str) -> HttpResponse:
    """GET asks for confirmation and changes nothing (chat apps and mail scanners open links
    to preview them, and must not use one up); POST moves the device here."""
    if request.method == "GET":
        device = devices.peek_transfer(token)
        current = devices.get_device(request)
        same = device is not None and current is not None and current.pk == device.pk
        # This browser's own watches, if it has any, stay with the identity it leaves.
        left = Watch.live.filter(device=current).count() if current and not same else 0
        context = {"valid": device is not None, "same_device": same, "leaves_behind": left}
        response = render(request, "watches/transfer.html", context, status=200 if device else 404)
    else:
        device = devices.redeem_transfer(request, token)
        if device is None:
            response = render(request, "watches/transfer.html", {"valid": False}, status=404)
        else:
            messages.success(request, _("This browser now holds your watches."))
            response = redirect("device-settings")
    response.headers["Referrer-Policy"] = TRANSFER_REFERRER_POLICY
    return response


@require_POST
def delete_data(request: HttpRequest) -> HttpResponse:
    if request.POST.get("confirm") != "yes":
        messages.error(request, _("Tick the box to confirm that everything should be deleted."))
        return redirect("device-settings")
    if devices.delete_device(request):
        messages.success(request, _("Everything this browser had with us is deleted."))
    return redirect("device-settings")


@require_POST
def points_settings(request: HttpRequest) -> HttpResponse:
    """Whether the member-only points count for this device (off until it says so). A
    checkbox cannot be invalid: unticked is off."""
    form = PointsForm(request.POST)
    form.is_valid()
    device = devices.get_or_create_device(request)
    Device.objects.filter(pk=device.pk).update(
        lyp_premium=bool(form.cleaned_data.get("lyp_premium"))
    )
    messages.success(request, _("Saved."))
    return redirect(reverse("device-settings") + "#points-h")


@require_POST
def set_language(request: HttpRequest) -> HttpResponse:
    """Django's language switch, and the device follows: its notifications are written in
    the language it last chose on the pages."""
    response = i18n.set_language(request)
    code = request.POST.get("language", "")
    device = devices.get_device(request)
    if device is not None and code in dict(settings.LANGUAGES) and device.language != code:
        Device.objects.filter(pk=device.pk).update(language=code)
    return response


def render_settings(
    request: HttpRequest, device: Device | None, *, status: int = 200, **extra
) -> HttpResponse:
    """The settings page; a form given in `extra` (email_form, via_form, quiet_form) is shown
    with its errors instead of a fresh one."""
    extra.setdefault("email_form", EmailAddressForm())
    extra.setdefault(
        "via_form",
        NotifyViaForm(initial={"notify_via": device.notify_via if device else NotifyVia.PUSH}),
    )
    extra.setdefault(
        "points_form", PointsForm(initial={"lyp_premium": bool(device and device.lyp_premium)})
    )
    extra.setdefault(
        "quiet_form",
        QuietHoursForm(
            initial={
                "quiet_start": device.quiet_start if device else None,
                "quiet_end": device.quiet_end if device else None,
                "time_zone": device.time_zone if device else "Asia/Tokyo",
            }
        ),
    )
    context = {
        "device": device,
        "watch_count": Watch.live.filter(device=device).count() if device else 0,
        "push_active": devices.push_active(device),
        "nav": "settings",
        "transfer_minutes": settings.DEVICE_TRANSFER_MINUTES,
        **extra,
    }
    return render(request, "watches/settings.html", context, status=status)


# --- Push subscription API (JSON) --------------------------------------------------------


@require_POST
def push_subscribe(request: HttpRequest) -> JsonResponse:
    """Store the browser's PushSubscription JSON (CSRF-protected: push.js sends the token).
    Creates the device on first need. 400 with a message, and nothing stored, when the
    subscription is not acceptable; 429, before reading anything, when the client address
    has subscribed SUBSCRIBE_PER_MINUTE times in the last minute."""
    if not throttle.allow(request, "push-subscribe", SUBSCRIBE_PER_MINUTE):
        response = JsonResponse(
            {
                "ok": False,
                "error": _(
                    "Too many subscriptions from this address. Wait a minute and try again."
                ),
            },
            status=429,
        )
        response.headers["Retry-After"] = str(throttle.WINDOW_SECONDS)
        return response
    try:
        subscription = parse_subscription(_json(request))
    except InvalidSubscription as exc:
        return _bad_request(exc)
    device = devices.get_or_create_device(request)
    save_subscription(device, subscription)
    return JsonResponse({"ok": True, "active": True})


@require_POST
def push_unsubscribe(request: HttpRequest) -> JsonResponse:
    """Forget the device's subscription. The body is empty, `{}`, or `{"endpoint": …}` (then
    only when it is the device's own: 404 otherwise); anything else is a 400 and changes
    nothing."""
    device = devices.get_device(request)
    if device is None:
        return _not_found()
    endpoint = None
    if request.META.get("CONTENT_LENGTH") not in (None, "", "0"):
        try:
            data = _json(request)
            if not isinstance(data, dict):
                raise InvalidSubscription('Send a JSON object: {} or {"endpoint": …}.')
            endpoint = data.get("endpoint")
            if endpoint is not None and not isinstance(endpoint, str):
                raise InvalidSubscription("The endpoint must be a string.")
        except InvalidSubscription as exc:
            return _bad_request(exc)
    if endpoint is not None and endpoint != device.push_endpoint:
        return _not_found()
    clear_subscription(device)
    return JsonResponse({"ok": True, "active": False})


@csrf_exempt
@require_POST
def push_resubscribe(request: HttpRequest) -> JsonResponse:
    """The service worker's `pushsubscriptionchange`: replace the device's subscription with
    the one the browser just made.

    A service worker cannot read the CSRF cookie or the page, so this endpoint does not use
    Django's token. It is protected instead by what a cross-site attacker cannot forge:
    - the device cookie is SameSite=Lax, so a cross-site POST does not carry it;
    - the `X-Yasugoro-Push: resubscribe` header is not CORS-safelisted: another origin can
      only send it after a preflight, which we never approve;
    - Origin must be present and ours (and Sec-Fetch-Site, where sent, `same-origin`);
    - `old_endpoint`, when the browser knows it, must be the device's current endpoint.
    The new subscription goes through the same strict validation as /push/subscribe."""
    problem = _not_from_our_worker(request)
    if problem:
        return JsonResponse({"ok": False, "error": problem}, status=403)
    device = devices.get_device(request)
    if device is None:
        return _not_found()
    try:
        data = _json(request)
        if not isinstance(data, dict):
            raise InvalidSubscription('Send {"old_endpoint": …, "subscription": {…}}.')
        subscription = parse_subscription(data.get("subscription"))
    except InvalidSubscription as exc:
        return _bad_request(exc)
    old = data.get("old_endpoint")
    if old and old != device.push_endpoint:
        return _not_found()
    save_subscription(device, subscription)
    return JsonResponse({"ok": True, "active": True})


@require_safe
def push_subscription(request: HttpRequest) -> JsonResponse:
    """The device's own subscription state (never the endpoint or keys)."""
    device = devices.get_device(request)
    if device is None:
        return _not_found()
    return JsonResponse(
        {
            "active": device.can_receive and device.channel == "webpush",
            "subscribed_at": device.push_subscribed_at.isoformat()
            if device.push_subscribed_at
            else None,
        }
    )


@require_safe
def watch_json(request: HttpRequest, watch_id: int) -> JsonResponse:
    """One of the device's own live watches; anyone else's is a 404."""
    try:
        watch = devices.owned_or_404(request, Watch.live.select_related("listing"), pk=watch_id)
    except Http404:
        return _not_found()
    return JsonResponse(
        {
            "id": watch.pk,
            "listing": {"id": watch.listing_id, "name": watch.listing.name},
            "trigger": watch.trigger,
            "target_price": watch.target_price,
            "drop_percent": watch.drop_percent,
            "paused": watch.paused,
            "last_notified_at": watch.last_notified_at.isoformat()
            if watch.last_notified_at
            else None,
        }
    )


def _json(request: HttpRequest):
    """The JSON body, refusing an oversized one before reading it."""
    check_declared_size(request.META.get("CONTENT_LENGTH"))
    return parse_json_body(request.body, request.content_type or "")


def _not_from_our_worker(request: HttpRequest) -> str:
    if request.headers.get(WORKER_HEADER) != "resubscribe":
        return f"missing {WORKER_HEADER} header"
    origin = request.headers.get("Origin", "")
    ours = {f"{request.scheme}://{request.get_host()}", *settings.CSRF_TRUSTED_ORIGINS}
    if origin not in ours:
        return "cross-origin request refused"
    if request.headers.get("Sec-Fetch-Site", "same-origin") != "same-origin":
        return "cross-site request refused"
    return ""


def _bad_request(exc: Exception) -> JsonResponse:
    return JsonResponse({"ok": False, "error": str(exc)}, status=400)


def _not_found() -> JsonResponse:
    return JsonResponse({"ok": False, "error": "not found"}, status=404)
