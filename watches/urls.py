"""End-user pages and the device's JSON endpoints."""

from django.urls import include, path

from watches.pages import device, email, products, views
from watches.pages import watches as watch_pages

urlpatterns = [
    path("", views.home, name="home"),
    path("add/", views.add_by_link, name="add-by-link"),
    path("listings/<int:listing_id>/", views.listing_detail, name="listing"),
    path(
        "listings/<int:listing_id>/product",
        products.listing_product,
        name="listing-product",
    ),
    path("products/add", products.add_by_jan, name="add-by-jan"),
    path("products/<int:product_id>/", products.product_detail, name="product"),
    path("watches/", watch_pages.my_watches, name="my-watches"),
    path("watches/<int:watch_id>/edit/", watch_pages.edit_watch, name="watch-edit"),
    path("watches/<int:watch_id>/pause", watch_pages.pause_watch, name="watch-pause"),
    path("watches/<int:watch_id>/remove", watch_pages.remove_watch, name="watch-remove"),
    path("watches/<int:watch_id>/restore", watch_pages.restore_watch, name="watch-restore"),
    path("language", device.set_language, name="set-language"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("settings/", device.settings_page, name="device-settings"),
    path("settings/transfer", device.create_transfer, name="device-transfer-create"),
    path("settings/delete", device.delete_data, name="device-delete"),
    path("settings/email", email.email_settings, name="device-email"),
    path("settings/channels", email.notify_via, name="device-notify-via"),
    path("settings/quiet", email.quiet_hours, name="device-quiet-hours"),
    path("settings/points", device.points_settings, name="device-points"),
    path("email/confirm/<str:token>/", email.confirm, name="email-confirm"),
    path("email/unsubscribe/<str:token>/", email.unsubscribe, name="email-unsubscribe"),
    path("transfer/<str:token>/", device.transfer, name="device-transfer"),
    path("push/subscribe", device.push_subscribe, name="push-subscribe"),
    path("push/unsubscribe", device.push_unsubscribe, name="push-unsubscribe"),
    path("push/resubscribe", device.push_resubscribe, name="push-resubscribe"),
    path("push/subscription", device.push_subscription, name="push-subscription"),
    path("me/watches/<int:watch_id>.json", device.watch_json, name="device-watch"),
]
