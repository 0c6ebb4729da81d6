"""A device's own notification history: the /notifications/ page and its JSON. Rows of other
devices do not exist here."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from outbox.models import Outbox
from outbox.reporting import explain
from watches.devices import get_device, owned_or_404, push_active
from watches.services import missed_for

HISTORY_LIMIT = 50
PAGE_SIZE = 20


@require_safe
def history_page(request: HttpRequest) -> HttpResponse:
    """Everything the outbox did for this browser, newest first: sent (with the price told),
    withheld and why, on the way. A browser with no device simply has nothing yet."""
    device = get_device(request)
    page = Paginator(explain.device_rows(device), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "outbox/history.html",
        {
            "nav": "history",
            "device": device,
            "page": page,
            "entries": explain.entries(list(page), device),
            # What a device that could not be reached would have been told (first page only).
            "missed": missed_for(device) if page.number == 1 else [],
            "push_active": push_active(device),
            # The channels that reach the device now (push, e-mail, both or none).
            "reaching": bool(device and device.receiving_channels),
        },
    )


@require_safe
def history(request: HttpRequest) -> JsonResponse:
    device = get_device(request)
    if device is None:
        return JsonResponse({"ok": False, "error": "not found"}, status=404)
    rows = Outbox.objects.filter(device=device).order_by("-created_at")[:HISTORY_LIMIT]
    return JsonResponse({"rows": [_row(row) for row in rows]})


@require_safe
def history_entry(request: HttpRequest, row_id: int) -> JsonResponse:
    try:
        row = owned_or_404(request, Outbox, pk=row_id)
    except Http404:
        return JsonResponse({"ok": False, "error": "not found"}, status=404)
    return JsonResponse(_row(row))


def _row(row: Outbox) -> dict:
    # What the person may see: what happened and why, never staff's technical detail.
    message = row.sent_message or {}
    return {
        "id": row.pk,
        "watch": row.watch_id,
        "trigger": row.trigger,
        "status": row.status,
        "reason": row.reason,
        "detected_at": row.detected_at.isoformat(),
        "sent_at": row.sent_at.isoformat() if row.sent_at else None,
        "title": message.get("title"),
        "body": message.get("body"),
    }
