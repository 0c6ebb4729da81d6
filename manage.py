#!/usr/bin/env python
"""Django's command-line entry point for Yasugoro."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yasugoro.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 (reading it loads the settings)
    except ImproperlyConfigured as error:
        # A missing or bad setting is one line the reader can act on, not a traceback.
        hint = "" if os.environ.get("DEBUG") else " (for local development, run with DEBUG=1)"
        sys.exit(f"manage.py: {error}{hint}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
