"""The real URLconf plus `/bench/minimal`: the least a Django view can do on the same server,
through the same middleware — the baseline of the pages benchmark."""

from django.http import HttpResponse
from django.urls import include, path


def minimal(request):
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("bench/minimal", minimal),
    path("", include("yasugoro.urls")),
]
