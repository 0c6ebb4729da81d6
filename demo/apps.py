from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _

TICK_SCHEDULE = "demo-tick"
TICK_TASK = "demo.tasks.demo_tick"


def _ensure_schedules(sender, **kwargs) -> None:
    from django.conf import settings

    from yasugoro.schedules import ensure_schedule, remove_schedule

    if settings.DEMO_TICK:
        ensure_schedule(TICK_SCHEDULE, TICK_TASK, minutes=settings.DEMO_TICK_MINUTES)
    else:
        # A demo market must never keep moving where its tick is switched off.
        remove_schedule(TICK_SCHEDULE)


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = _("Demo marketplace")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="demo-schedules")
