from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_schedules(sender, **kwargs) -> None:
    from django.conf import settings

    from yasugoro.schedules import ensure_schedule

    ensure_schedule("watches-poll", "watches.tasks.poll", minutes=settings.POLL_MINUTES)


class WatchesConfig(AppConfig):
    name = "watches"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="watches-schedules")
