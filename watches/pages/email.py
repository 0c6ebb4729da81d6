"""The e-mail address on /settings/ (add or change, remove, which channels, quiet hours), the
confirmation link of the double opt-in, and the one-click unsubscribe of RFC 8058. Thin: the
address's life is `watches.email_address`."""

from __future__ import annotations

import logging
import smtplib

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from watches import devices, email_address
from watches.models import Device
from watches.pages.device import TRANSFER_REFERRER_POLICY, render_settings
from watches.pages.forms import EmailAddressForm, NotifyViaForm, QuietHoursForm

log = logging.getLogger("watches.email")

# The confirmation and unsubscribe pages carry a token in their URL: it must not leave in a
# Referer, while our own form keeps a real Origin (see views_device.TRANSFER_REFERRER_POLICY).
TOKEN_REFERRER_POLICY = TRANSFER_REFERRER_POLICY


@require_POST
def email_settings(request: HttpRequest) -> HttpResponse:
    """Add or change the address (a confirmation mail goes to it), or remove it
    (`remove=1`). Bad input is a 400 with the form's message and nothing written; more
    than EMAIL_CONFIRM_PER_HOUR confirmations for the device or the address is a 429."""
    if request.POST.get("remove"):
        device = devices.get_device(request)
        if device is not None and device.email:
            email_address.remove_address(device)
            messages.success(request, _("The e-mail address is removed."))
        return redirect(reverse("device-settings") + "#email-h")
    form = EmailAddressForm(request.POST)
    if not form.is_valid():
        return render_settings(request, devices.get_device(request), email_form=form, status=400)
    device = devices.get_or_create_device(request)
    try:
        changed = email_address.set_address(device, form.cleaned_data["email"])
    except email_address.Throttled:
        form.add_error(
            "email", _("Too many confirmation mails this hour. Wait a while and try again.")
        )
        response = render_settings(request, device, email_form=form, status=429)
        response.headers["Retry-After"] = "3600"
        return response
    if not changed:
        messages.info(request, _("This address is already confirmed."))
        return redirect(reverse("device-settings") + "#email-h")
    # SITE_URL, as every mail links (decision 0054): a request's Host is whatever the client
    # sent, and this link carries the token to whoever serves that host.
    link = settings.SITE_URL + reverse("email-confirm", args=[email_address.confirm_token(device)])
    try:
        email_address.send_confirmation(device, link)
    except (smtplib.SMTPException, OSError) as exc:
        log.warning("confirmation mail to device %s not sent: %s", device.pk, type(exc).__name__)
        messages.error(
            request, _("We could not send the confirmation mail just now. Try again later.")
        )
    else:
        messages.success(
            request,
            _("We sent a confirmation link to %(address)s. Open it to start receiving e-mail.")
            % {"address": device.email},
        )
    return redirect(reverse("device-settings") + "#email-h")


@require_POST
def notify_via(request: HttpRequest) -> HttpResponse:
    """Which channels notifications go out on: push, e-mail or both."""
    form = NotifyViaForm(request.POST)
    if not form.is_valid():
        return render_settings(request, devices.get_device(request), via_form=form, status=400)
    device = devices.get_or_create_device(request)
    Device.objects.filter(pk=device.pk).update(notify_via=form.cleaned_data["notify_via"])
    messages.success(request, _("Saved."))
    return redirect(reverse("device-settings") + "#email-h")


@require_POST
def quiet_hours(request: HttpRequest) -> HttpResponse:
    """The device's daily quiet window (both times empty: off). Bad input is a 400 with the
    form's message and nothing written."""
    form = QuietHoursForm(request.POST)
    if not form.is_valid():
        return render_settings(request, devices.get_device(request), quiet_form=form, status=400)
    device = devices.get_or_create_device(request)
    Device.objects.filter(pk=device.pk).update(**form.cleaned_data)
    messages.success(request, _("Saved."))
    return redirect(reverse("device-settings") + "#quiet-h")


@require_http_methods(["GET", "HEAD", "POST"])
def confirm(request: HttpRequest, token: str) -> HttpResponse:
    """GET asks (mail scanners open links and must not confirm anything); POST confirms the
    address the signed token was made for. A tampered or expired token is a 400."""
    if request.method != "POST":
        problem = _check(token, email_address.CONFIRM_SALT, settings.EMAIL_CONFIRM_HOURS * 3600)
        status = 400 if problem else 200
        response = render(
            request, "watches/email_confirm.html", {"problem": problem}, status=status
        )
    else:
        try:
            device = email_address.confirm(token)
        except email_address.BadToken as exc:
            response = render(
                request, "watches/email_confirm.html", {"problem": exc.problem}, status=400
            )
        else:
            if device is None:
                messages.error(request, _("This link is for an address you no longer use."))
            else:
                messages.success(
                    request, _("%(address)s is confirmed.") % {"address": device.email}
                )
            response = redirect(reverse("device-settings") + "#email-h")
    response.headers["Referrer-Policy"] = TOKEN_REFERRER_POLICY
    return response


@csrf_exempt
@require_http_methods(["GET", "HEAD", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """RFC 8058: a mail client POSTs here with no cookie and no CSRF token (the signed token
    in the URL is the authority: it names one device and one address), and the address is
    removed. GET shows a button that POSTs (a link scanner's GET changes nothing). A
    tampered or expired token is a 400 and changes nothing."""
    if request.method != "POST":
        days = settings.EMAIL_UNSUBSCRIBE_DAYS
        problem = _check(token, email_address.UNSUBSCRIBE_SALT, days * 86400)
        context = {"problem": problem, "asking": True}
        status = 400 if problem else 200
    else:
        try:
            removed = email_address.unsubscribe(token)
        except email_address.BadToken as exc:
            context, status = {"problem": exc.problem}, 400
        else:
            context, status = {"done": True, "removed": removed}, 200
    response = render(request, "watches/email_unsubscribe.html", context, status=status)
    response.headers["Referrer-Policy"] = TOKEN_REFERRER_POLICY
    return response


def _check(token: str, salt: str, max_age: int) -> str:
    try:
        email_address.load_token(token, salt, max_age)
    except email_address.BadToken as exc:
        return exc.problem.value
    return ""
