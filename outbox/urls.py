"""Delivery's end-user URLs: the service worker, the test notification, the device's history."""

from django.urls import path

from outbox.pages import history, push

urlpatterns = [
    path("sw.js", push.service_worker, name="service-worker"),
    path("push/test", push.send_test, name="push-test"),
    path("notifications/", history.history_page, name="history"),
    path("me/history.json", history.history, name="device-history"),
    path("me/history/<int:row_id>.json", history.history_entry, name="device-history-entry"),
]
