"""The dispatcher's log: one line per cycle, newest first. Pruned by retention, never edited."""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from outbox.models import DispatchRun
from outbox.reporting.paginator import CappedCountPaginator
from yasugoro.admin_mixins import ReadOnlyAdminMixin


@admin.register(DispatchRun)
class DispatchRunAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "started_at",
        "duration",
        "holder",
        "claimed",
        "sent",
        "dropped",
        "retry",
        "failed",
        "recovered",
        "error",
    )
    list_filter = (("error", admin.EmptyFieldListFilter), "started_at")
    ordering = ("-started_at",)
    list_per_page = 50
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description=_("took"))
    def duration(self, run: DispatchRun) -> str:
        seconds = (run.finished_at - run.started_at).total_seconds()
        return gettext("%(seconds).1f s") % {"seconds": seconds}
