"""Admin building blocks shared by the apps."""

from __future__ import annotations

from typing import Any


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
