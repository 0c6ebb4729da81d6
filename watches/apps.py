from django.apps import AppConfig


class WatchesConfig(AppConfig):
    name = "watches"
    default_auto_field = "django.db.models.BigAutoField"
