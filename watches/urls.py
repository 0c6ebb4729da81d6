"""End-user pages."""

from django.urls import include, path

from watches import views

urlpatterns = [
    path("", views.home, name="home"),
    path("listings/<int:listing_id>/", views.listing_detail, name="listing"),
    path("i18n/", include("django.conf.urls.i18n")),
]
