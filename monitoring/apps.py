from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = _("Monitoring")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from monitoring import hooks

        hooks.connect()
