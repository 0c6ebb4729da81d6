"""End-user pages and the device's JSON endpoints."""

from django.urls import include, path

from watches import views, views_device

urlpatterns = [
    path("", views.home, name="home"),
    path("listings/<int:listing_id>/", views.listing_detail, name="listing"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("settings/", views_device.settings_page, name="device-settings"),
    path("settings/transfer", views_device.create_transfer, name="device-transfer-create"),
    path("settings/delete", views_device.delete_data, name="device-delete"),
    path("transfer/<str:token>/", views_device.transfer, name="device-transfer"),
    path("push/subscribe", views_device.push_subscribe, name="push-subscribe"),
    path("push/unsubscribe", views_device.push_unsubscribe, name="push-unsubscribe"),
    path("push/resubscribe", views_device.push_resubscribe, name="push-resubscribe"),
    path("push/subscription", views_device.push_subscription, name="push-subscription"),
    path("me/watches/<int:watch_id>.json", views_device.watch_json, name="device-watch"),
]
