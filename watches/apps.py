from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


def _ensure_schedules(sender, **kwargs) -> None:
    from django.conf import settings

    from yasugoro.schedules import ensure_schedule, remove_schedule

    ensure_schedule("watches-poll", "watches.tasks.poll", minutes=settings.POLL_MINUTES)
    if settings.DEMO_TICK:
        ensure_schedule("demo-tick", "watches.tasks.demo_tick", minutes=settings.DEMO_TICK_MINUTES)
    else:
        # A demo market must never keep moving where the demo is switched off.
        remove_schedule("demo-tick")


class WatchesConfig(AppConfig):
    name = "watches"
    verbose_name = _("Watches")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="watches-schedules")
