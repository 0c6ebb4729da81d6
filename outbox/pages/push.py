"""The browser side of Web Push that belongs to delivery: the service worker script (it shows
what the channel sends) and the settings page's "send a test notification" button."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from django.contrib import messages
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST, require_safe

from outbox import vapid
from outbox.channels.base import DeliveryError, DeliveryKind, Message, get_channel
from watches.devices import get_device
from watches.models import Channel
from watches.services import deactivate_gone_subscriptions

if TYPE_CHECKING:
    from outbox.channels.webpush import WebPushChannel

log = logging.getLogger("outbox.webpush")

# One test notification per device per this many seconds: a button pressed repeatedly
# should not become a stream of pushes.
TEST_COOLDOWN_SECONDS = 10


@require_safe
def service_worker(request: HttpRequest) -> HttpResponse:
    """/sw.js, at the site root so its scope can be the whole site. Rendered with the
    applicationServerKey (for `pushsubscriptionchange`), so a new key is a new script and
    the browser updates the worker. `no-cache`: the browser revalidates on every update check."""
    body = render_to_string(
        "watches/sw.js", {"application_server_key": vapid.public_key_or_empty()}, request
    )
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response.headers["Service-Worker-Allowed"] = "/"
    response.headers["Cache-Control"] = "no-cache"
    return response


@require_POST
def send_test(request: HttpRequest) -> HttpResponse:
    """Send a real push to this browser through the webpush channel — not through the
    outbox, so it tests exactly the path notifications take without touching any watch."""
    device = get_device(request)
    if device is None or not device.can_receive or device.channel != Channel.WEBPUSH:
        messages.warning(
            request, _("This browser has no push subscription yet: turn notifications on first.")
        )
        return redirect("device-settings")
    if not cache.add(f"push-test:{device.pk}", 1, timeout=TEST_COOLDOWN_SECONDS):
        messages.info(request, _("A test notification was just sent; wait a few seconds."))
        return redirect("device-settings")
    with translation.override(device.language):
        message = Message(
            title=_("Yasugoro test notification"),
            body=_("Notifications reach this browser."),
            url="/settings/",
            tag=f"test-{device.short_id}",
            topic="test",
            listing_id=None,
            price=None,
        )
    endpoint = device.push_endpoint
    # The class configured for push (OUTBOX_CHANNEL_CLASSES, by import path): the test goes
    # to the device itself, through its `deliver_to`.
    channel = cast("WebPushChannel", get_channel(Channel.WEBPUSH))
    try:
        channel.deliver_to(device, message)
    except DeliveryError as error:
        if error.kind == DeliveryKind.GONE:
            deactivate_gone_subscriptions([(device.pk, endpoint)])
            messages.error(
                request,
                _(
                    "The push service says this subscription no longer exists. "
                    "Turn notifications on again."
                ),
            )
        else:
            log.warning("test push to device %s failed: %s", device.pk, error.kind)
            messages.error(
                request,
                _("The test notification could not be sent (%(kind)s). Try again later.")
                % {"kind": error.kind.value},
            )
        return redirect("device-settings")
    messages.success(request, _("Test notification sent. It should appear in a moment."))
    return redirect("device-settings")
