"""URL map: admin for staff, everything else belongs to the watches app's pages."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("watches.urls")),
]
