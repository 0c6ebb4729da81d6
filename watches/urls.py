"""End-user pages."""

from django.urls import path

from watches import views

urlpatterns = [
    path("", views.home, name="home"),
]
