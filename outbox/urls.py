"""Delivery's end-user URLs: the service worker, the test notification, the device's history."""

from django.urls import path

from outbox import views_history, views_push

urlpatterns = [
    path("sw.js", views_push.service_worker, name="service-worker"),
    path("push/test", views_push.send_test, name="push-test"),
    path("notifications/", views_history.history_page, name="history"),
    path("me/history.json", views_history.history, name="device-history"),
    path("me/history/<int:row_id>.json", views_history.history_entry, name="device-history-entry"),
]
