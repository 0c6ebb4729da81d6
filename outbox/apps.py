from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_schedules(sender, **kwargs) -> None:
    from yasugoro.schedules import ensure_schedule

    ensure_schedule("outbox-dispatch", "outbox.tasks.dispatch", minutes=1)
    ensure_schedule("outbox-retention", "outbox.tasks.retention", minutes=24 * 60)


class OutboxConfig(AppConfig):
    name = "outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="outbox-schedules")
