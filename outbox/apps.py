from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


def _ensure_schedules(sender, **kwargs) -> None:
    from yasugoro.schedules import ensure_schedule

    ensure_schedule("outbox-dispatch", "outbox.tasks.dispatch", minutes=1)
    ensure_schedule("outbox-retention", "outbox.tasks.retention", minutes=24 * 60)


# The settings naming classes a dispatcher uses — its channels, and the marketplaces it
# re-fetches from (`common.registry`): imported at a worker's spawn, and by the benches that
# stand in for one.
WORKER_REGISTRIES = ("OUTBOX_CHANNEL_CLASSES", "MARKETPLACE_ADAPTERS")


class OutboxConfig(AppConfig):
    name = "outbox"
    verbose_name = _("Outbox")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from common.longlived import freeze_at_spawn
        from outbox.lease import check_settings
        from outbox.reporting.levers import drop_for_paused_listings

        check_settings()  # a lease a live dispatcher could outlive stops start-up
        from watches.services import listings_paused

        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="outbox-schedules")
        # What a dispatch cycle runs, the channels it delivers through included, is loaded
        # once per worker, then frozen out of the collector's full walks (common.longlived).
        freeze_at_spawn("outbox.tasks", WORKER_REGISTRIES)
        # Pausing a listing drops its queued notifications at once (watches sends, we act).
        listings_paused.connect(drop_for_paused_listings, dispatch_uid="outbox-listing-paused")
