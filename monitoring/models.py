"""The counters behind /metrics: one row per metric series, shared by every process.

Web and worker processes run on several hosts, and Prometheus scrapes any one web process:
a counter kept in a process's memory would show only that process's share. So each process
adds what it counted to these rows (`monitoring.store.flush`), and /metrics reads them.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Counter(models.Model):
    """A monotonic total: `name` and its canonical `labels` (`key="value",…`, sorted)."""

    name = models.CharField(max_length=100)
    labels = models.CharField(max_length=300, blank=True)
    # Float: histogram sums are seconds. A double counts integers exactly up to 2**53.
    value = models.FloatField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("metric counter")
        verbose_name_plural = _("metric counters")
        constraints = [
            # The upsert's conflict target: one row per series.
            models.UniqueConstraint(fields=["name", "labels"], name="counter_series"),
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}} {self.value:g}"
