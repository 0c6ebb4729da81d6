"""/healthz, /readyz and /metrics, answered before anything else runs.

Load balancers, systemd and Prometheus ask by IP address over plain HTTP: first in the
middleware list, these answers skip the host-name check (ALLOWED_HOSTS), the HTTPS redirect,
sessions and CSRF, none of which mean anything to a probe. Everything else goes on as usual.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from monitoring import views

PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": views.healthz,
    "/readyz": views.readyz,
    "/metrics": views.metrics,
}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info.rstrip("/") or "/")
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse(status=405, content_type="text/plain; charset=utf-8")
            response["Allow"] = "GET, HEAD"
            return response
        response = probe(request)
        response["Cache-Control"] = "no-store"
        return response
