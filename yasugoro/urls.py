"""URL map: admin for staff; delivery's few end-user URLs (the service worker, the test
notification, history); everything else belongs to the watches app's pages. /healthz,
/readyz and /metrics are answered by `monitoring.middleware` before any URL is resolved."""

from django.contrib import admin
from django.urls import include, path

from yasugoro import views

admin.site.site_header = "Yasugoro"
admin.site.site_title = "Yasugoro"

urlpatterns = [
    path("favicon.ico", views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("", include("outbox.urls")),
    path("", include("watches.urls")),
]
