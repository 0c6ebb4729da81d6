"""Fitting text into a limit."""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """`text` unchanged when it has at most `limit` characters; otherwise its first
    `limit - 1` characters and "…", so the result is exactly `limit` long and a reader sees
    that something was cut."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS
