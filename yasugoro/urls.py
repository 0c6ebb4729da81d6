"""URL map: admin for staff; delivery's few end-user URLs (the service worker, the test
notification, history); everything else belongs to the watches app's pages."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("outbox.urls")),
    path("", include("watches.urls")),
]
