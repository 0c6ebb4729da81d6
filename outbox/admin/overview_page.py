"""The overview in the admin: a page of its own, and a panel on top of the changelist. The
numbers come from `outbox.reporting.stats`, their arrangement from
`outbox.reporting.overview`; both add a banner for each marketplace halted for a
configuration fault, and the page the marketplaces' budgets and the coverage of watched
listings (from `watches.services`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext

from outbox.models import Outbox
from outbox.reporting.overview import HaltBanner, Overview, build_overview
from outbox.reporting.stats import outbox_stats
from watches import services

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Outbox]  # what the mixin is mixed into (generic in the stubs)
else:
    _ModelAdmin = object


class OverviewMixin(_ModelAdmin):
    """For the Outbox ModelAdmin: `overview/` and the changelist's overview panel."""

    def get_urls(self):
        overview = path(
            "overview/",
            self.admin_site.admin_view(self.overview_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_overview",
        )
        return [overview, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        # Lazy: an action's POST redirects without rendering, so it costs no counting. The
        # panel is the compact one (health, counts per status): the chart and the reasons
        # are one click away, on the overview page.
        compact = SimpleLazyObject(lambda: self.overview(chart=False))
        extra_context = {**(extra_context or {}), "overview": compact}
        return super().changelist_view(request, extra_context)

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Outbox overview"),
            "opts": self.opts,
            "overview": self.overview(),
            "marketplaces": marketplace_overview(timezone.now()),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/outbox/outbox/overview.html", context)

    def overview(self, *, chart: bool = True) -> Overview:
        changelist_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
        stats = outbox_stats() if chart else outbox_stats(chart_days=0)
        return build_overview(stats, changelist_url, halt_banners())


def halt_banners() -> list[HaltBanner]:
    """The marketplaces halted for a configuration fault (`watches.services`): a banner on
    the overview page and on the changelist's panel, where staff look first."""
    return [
        HaltBanner(
            source=halt.source,
            label=halt.get_source_display(),
            settings=names,
            detail=halt.detail,
            since=halt.since,
            next_probe_at=halt.probe_after,
        )
        for halt, names in services.marketplace_halts()
    ]


def marketplace_overview(now) -> dict:
    """The marketplaces' budgets per application id and the coverage of watched listings
    (watches.polling.plan), for the overview page only: the budget may live in Redis."""
    return {
        "budgets": services.budget_status(now),
        "coverage": services.watched_coverage(now),
    }
