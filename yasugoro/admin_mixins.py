"""Admin building blocks shared by the apps."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseBadRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext


class ReadOnlyAdminMixin:
    """For a ModelAdmin or an inline over history that nobody may add to, edit or delete
    from (the outbox, its events, the dispatch cycles): staff with the view permission read
    it; levers that move rows check their own permission. The signatures take the inline's
    extra `obj` too, so one mixin serves both kinds."""

    def has_add_permission(self, request: Any, *args: Any, **kwargs: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class PlainActionCheckboxMixin:
    """For a ModelAdmin with actions on a long list: each row's checkbox written out directly,
    the same HTML Django renders through a form widget template — that template costs more
    per row than every other cell of an outbox row together."""

    def action_checkbox(self, obj: Any) -> SafeString:
        label = format_html(gettext("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            obj.pk,
            label,
        )


class CheckedActionIdsMixin:
    """For a ModelAdmin with actions (Django's own "delete selected" included): a posted row
    id that cannot be one of the model's keys (a hand-made or mangled form: not a number, or
    beyond the column's range) gets a 400 and nothing is done. Django would filter `pk__in`
    with it, and the database driver's error is a 500."""

    def response_action(self, request: Any, queryset: Any) -> HttpResponse | None:
        key = self.model._meta.pk  # type: ignore[attr-defined]
        for value in request.POST.getlist(ACTION_CHECKBOX_NAME):
            try:
                key.clean(value, None)  # its type, and its column's range
            except ValidationError:
                return HttpResponseBadRequest(
                    gettext("A selected row's id is not valid: nothing was done."),
                    content_type="text/plain; charset=utf-8",
                )
        return super().response_action(request, queryset)  # type: ignore[misc]
