"""Project-wide answers that belong to no app."""

from __future__ import annotations

from django.conf import settings
from django.http import FileResponse, HttpRequest
from django.views.decorators.http import require_safe

FAVICON = settings.BASE_DIR / "static" / "favicon.ico"


@require_safe
def favicon(request: HttpRequest) -> FileResponse:
    """/favicon.ico, which browsers ask for on every site whatever the page links: the same
    icon as `static/icon.svg`, at 16, 32 and 48 px. Cached for a day."""
    response = FileResponse(FAVICON.open("rb"), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
