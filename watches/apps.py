from django.apps import AppConfig
from django.db.models.signals import post_delete, post_migrate
from django.utils.translation import gettext_lazy as _


def _ensure_schedules(sender, **kwargs) -> None:
    from django.conf import settings

    from yasugoro.schedules import ensure_schedule

    ensure_schedule("watches-poll", "watches.tasks.poll", minutes=settings.POLL_EVERY_MINUTES)


def _ensure_triggers(sender, using="default", **kwargs) -> None:
    from django.db import connections

    from watches.search import index as search_index

    search_index.install(connections[using])


def _listing_deleted(sender, instance, **kwargs) -> None:
    from django.db import transaction

    from watches.pages.pagecache import listings_changed

    # Cached pages may show it (a listing page is served from the cache without a query).
    pk = instance.pk
    transaction.on_commit(lambda: listings_changed([pk]))


def _product_deleted(sender, instance, **kwargs) -> None:
    from django.db import transaction

    from watches.pages.pagecache import products_changed

    # Its cached page would still be served: it answers 404 once this is committed.
    pk = instance.pk
    transaction.on_commit(lambda: products_changed([pk]))


class WatchesConfig(AppConfig):
    name = "watches"
    verbose_name = _("Watches")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from common.longlived import freeze_at_spawn

        post_migrate.connect(_ensure_schedules, sender=self, dispatch_uid="watches-schedules")
        # A table rebuilt by a later migration loses its search triggers: put them back.
        post_migrate.connect(_ensure_triggers, sender=self, dispatch_uid="watches-triggers")
        post_delete.connect(
            _listing_deleted, sender="watches.Listing", dispatch_uid="watches-listing-deleted"
        )
        post_delete.connect(
            _product_deleted, sender="watches.Product", dispatch_uid="watches-product-deleted"
        )
        # What a polling run needs, the marketplace adapters included, is loaded once per
        # worker (common.longlived).
        freeze_at_spawn("watches.tasks", ("MARKETPLACE_ADAPTERS",))
