"""A model's columns by field name, for the code that writes its own SQL."""

from __future__ import annotations

from typing import Any

from django.db import models


def concrete_field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The model's field of that name that is a column of its table: `_meta.get_field` also
    answers reverse relations and generic foreign keys, which have none."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.concrete:
        raise ValueError(f"{name} is not a column of {model._meta.label}")
    return field


def max_length(model: type[models.Model], name: str) -> int:
    """The declared length of a model's text column: what a value written there is clipped
    to."""
    length = concrete_field(model, name).max_length
    if length is None:
        raise ValueError(f"{model._meta.label}.{name} declares no max_length")
    return length
