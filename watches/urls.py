"""End-user pages and the device's JSON endpoints."""

from django.urls import include, path

from watches import views, views_device, views_email, views_products, views_watches

urlpatterns = [
    path("", views.home, name="home"),
    path("add/", views.add_by_link, name="add-by-link"),
    path("listings/<int:listing_id>/", views.listing_detail, name="listing"),
    path(
        "listings/<int:listing_id>/product",
        views_products.listing_product,
        name="listing-product",
    ),
    path("products/add", views_products.add_by_jan, name="add-by-jan"),
    path("products/<int:product_id>/", views_products.product_detail, name="product"),
    path("watches/", views_watches.my_watches, name="my-watches"),
    path("watches/<int:watch_id>/edit/", views_watches.edit_watch, name="watch-edit"),
    path("watches/<int:watch_id>/pause", views_watches.pause_watch, name="watch-pause"),
    path("watches/<int:watch_id>/remove", views_watches.remove_watch, name="watch-remove"),
    path("watches/<int:watch_id>/restore", views_watches.restore_watch, name="watch-restore"),
    path("language", views_device.set_language, name="set-language"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("settings/", views_device.settings_page, name="device-settings"),
    path("settings/transfer", views_device.create_transfer, name="device-transfer-create"),
    path("settings/delete", views_device.delete_data, name="device-delete"),
    path("settings/email", views_email.email_settings, name="device-email"),
    path("settings/channels", views_email.notify_via, name="device-notify-via"),
    path("settings/quiet", views_email.quiet_hours, name="device-quiet-hours"),
    path("email/confirm/<str:token>/", views_email.confirm, name="email-confirm"),
    path("email/unsubscribe/<str:token>/", views_email.unsubscribe, name="email-unsubscribe"),
    path("transfer/<str:token>/", views_device.transfer, name="device-transfer"),
    path("push/subscribe", views_device.push_subscribe, name="push-subscribe"),
    path("push/unsubscribe", views_device.push_unsubscribe, name="push-unsubscribe"),
    path("push/resubscribe", views_device.push_resubscribe, name="push-resubscribe"),
    path("push/subscription", views_device.push_subscription, name="push-subscription"),
    path("me/watches/<int:watch_id>.json", views_device.watch_json, name="device-watch"),
]
