"""A device's own notification history, as JSON. Rows of other devices do not exist here."""

from __future__ import annotations

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_safe

from outbox.models import Outbox
from watches.devices import get_device, owned_or_404

HISTORY_LIMIT = 50


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
