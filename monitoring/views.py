"""The probes' answers: small JSON for health, the Prometheus text format for metrics."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse

from monitoring import access, exposition, health

log = logging.getLogger("monitoring")


def healthz(request: HttpRequest) -> HttpResponse:
    """The process answers. Touches nothing else: a liveness probe that failed because the
    database is down would have systemd restart a healthy process for nothing."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    """200 when every readiness check passes, else 503; the body says which failed."""
    result = health.readiness()
    return JsonResponse(result.as_json(), status=200 if result.ready else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    if not access.may_read_metrics(request):
        response = HttpResponse(
            "metrics need `Authorization: Bearer <METRICS_TOKEN>` (or a request from this "
            "host that no proxy relayed)\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    try:
        body = exposition.render()
    except DatabaseError as exc:
        log.warning("metrics: database unavailable: %s", type(exc).__name__)
        return HttpResponse(
            "database unavailable\n", status=503, content_type="text/plain; charset=utf-8"
        )
    return HttpResponse(body, content_type=exposition.CONTENT_TYPE)
