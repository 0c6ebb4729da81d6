"""Running a management command as a person would, for its output."""

from __future__ import annotations

import io

from django.core.management import call_command


def output_lines(command: str, *args: str) -> list[str]:
    """What `manage.py command args…` prints, line by line (raises CommandError as it)."""
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().splitlines()
