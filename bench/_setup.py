"""Shared start-up for bench scripts: a throw-away SQLite file database, migrated."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


def django_on_temp_sqlite(name: str) -> Path:
    """Point Django at a fresh SQLite file in a temp folder (removed at exit), set it up and
    migrate."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    folder = Path(tempfile.mkdtemp(prefix=f"yasugoro-{name}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # a million rows weigh
    path = folder / "bench.sqlite3"
    os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yasugoro.settings")
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@example.invalid")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("YASUGORO_VAR_DIR", str(folder))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return path
