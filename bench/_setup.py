"""Shared start-up for bench scripts: a throw-away database — a SQLite file, or a PostgreSQL
database the bench creates itself (never `test`) — migrated, and removed at exit; and one
child process per database for the benches that measure both."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

PG_SERVER = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")


def django_on_temp_sqlite(name: str, under: Path | None = None) -> Path:
    """Point Django at a fresh SQLite file in a temp folder (removed at exit; inside `under`
    when given, else the system's), set it up and migrate."""
    folder = _temp_folder(name, under)
    path = folder / "bench.sqlite3"
    _start_django(f"sqlite:///{path}", folder)
    return path


def postgres_available() -> bool:
    return (
        subprocess.run(
            ["psql", f"{PG_SERVER}/postgres", "-Atc", "select 1"], capture_output=True
        ).returncode
        == 0
    )


def django_on_temp_postgres(name: str) -> str:
    """Create database `yasugoro_bench_<name>_<pid>` on the local PostgreSQL (dropped at
    exit), point Django at it and migrate. Returns its URL. The process id keeps two runs (two
    checkouts on one server) from dropping each other's database."""
    database = f"yasugoro_bench_{name}_{os.getpid()}"
    admin = ["psql", f"{PG_SERVER}/postgres", "-q", "-c"]
    subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'], check=True)
    subprocess.run([*admin, f'CREATE DATABASE "{database}"'], check=True)

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'])

    atexit.register(drop)
    url = f"{PG_SERVER}/{database}"
    _start_django(url, _temp_folder(name))
    return url


def each_database(script: str, args: list[str]) -> None:
    """Run `script args… VENDOR` once per database (SQLite, and PostgreSQL when it answers):
    one process each, as Django reads its settings once."""
    vendors = ["sqlite"] + (["postgresql"] if postgres_available() else [])
    if len(vendors) == 1:
        print("PostgreSQL is not reachable: measuring SQLite only")
    for vendor in vendors:
        subprocess.run([sys.executable, script, *args, vendor], check=False)


def django_at(database_url: str, folder: Path) -> None:
    """Point Django at `database_url` (which the caller removes), local state in `folder`, and
    migrate."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["YASUGORO_VAR_DIR"] = str(folder)  # not the checkout's var/, even if set
    _start_django(database_url, folder)


def _temp_folder(name: str, under: Path | None = None) -> Path:
    if under is not None:
        under.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"yasugoro-{name}-", dir=under))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # a million rows weigh
    return folder


def _start_django(database_url: str, folder: Path) -> None:
    # A bench stopped by SIGTERM (a timeout, `kill`) still runs its atexit clean-up: the
    # temporary folder, the PostgreSQL database, the server it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yasugoro.settings")
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@example.invalid")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("YASUGORO_VAR_DIR", str(folder))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
