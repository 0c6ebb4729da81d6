"""Instructions, not seconds: bench_dispatch.py's listings target (2,000 due rows over 10
listings against the same rows over 2,000 listings) counted by callgrind, one warm dispatch
cycle in each world, on SQLite.

A shared machine's wall and CPU times for the same cycle vary by a quarter from one round to
the next (another tenant, the hypervisor's steal counted as the process's time), which hides
a change worth a few percent however many rounds are run. Callgrind counts the instructions
the process executes (Python, the driver and SQLite, in-process): the same code, data and
settings give the same count to about 0.2 %, whatever else the machine is doing. It does not
count system calls or waiting (commits' writes, the page cache), so it complements
bench_dispatch.py's wall-time ratio and does not replace it; and it says nothing of
PostgreSQL, whose server does its work in other processes.

The two worlds are built once (bench_dispatch.py's `build`: demo listings with 90 days of
history, console watches with one due row each) in a temporary folder; each cycle then runs
in its own process under `valgrind --tool=callgrind` (the two at once), on its own copy of
the database: one cycle to warm up (imports, caches, the statement cache), the rows put back
as the poll that detected them left them (`reset`), and the next cycle counted —
instrumentation switched on right before it and off right after (`callgrind_control`).
Everything is removed at the end.

    .venv/bin/python bench/count_dispatch.py

Needs valgrind (Debian's package; `callgrind_control` comes with it). About two minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# (bench_dispatch.py's world number, rows, listings): the two its listings target compares.
WORLDS = ((1, 2_000, 10), (2, 2_000, 2_000))
BENCH = Path(__file__).resolve().parent


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--build":
        build(Path(sys.argv[2]))
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "--cycle":
        cycle(Path(sys.argv[2]), json.loads(sys.argv[3]))
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
    folder = Path(tempfile.mkdtemp(prefix="yasugoro-count-"))
    try:
        return compare(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare(folder: Path) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict and set orders every run
    made = subprocess.run(
        [sys.executable, __file__, "--build", str(folder)], capture_output=True, text=True, env=env
    )
    if made.returncode != 0 or not made.stdout.strip():
        print(f"building the worlds failed\n{made.stdout}\n{made.stderr[-3000:]}")
        return 1
    built = json.loads(made.stdout.strip().splitlines()[-1])
    runs: list[subprocess.Popen] = []
    try:
        for n, rows, listings in WORLDS:
            world = {"n": n, "rows": rows, "listings": listings, "built": built["built"]}
            world.update(built[str(n)])
            runs.append(_counted(folder, world, env))
        counts = {}
        for (n, _, _), run in zip(WORLDS, runs, strict=True):
            out, err = run.communicate()
            found = re.search(r"Collected : (\d+)", err)
            if run.returncode != 0 or found is None or "counted" not in out:
                print(f"world {n}: the cycle did not run to its end\n{out}\n{err[-2000:]}")
                return 1
            counts[n] = int(found.group(1))
    finally:
        # A failed or interrupted comparison leaves no cycle running (it would write into the
        # folder being removed).
        for run in runs:
            if run.poll() is None:
                run.kill()
            run.wait()
    (few_n, rows, few), (many_n, _, many) = WORLDS
    print(
        f"\nsqlite: one warm dispatch cycle of {rows:,} rows, instructions (callgrind)\n"
        f"  over {few:,} listings:   {counts[few_n] / 1e6:8.1f} M\n"
        f"  over {many:,} listings: {counts[many_n] / 1e6:8.1f} M\n"
        f"  each listing more adds {(counts[many_n] - counts[few_n]) / (many - few):,.0f}\n"
        f"  {many:,} listings / {few} listings (same rows): "
        f"{counts[few_n] / counts[many_n]:.3f}×  (instructions' ratio: higher is better)"
    )
    return 0


def _counted(folder: Path, world: dict, env: dict[str, str]) -> subprocess.Popen:
    """`cycle(folder, world)` in a process of its own under callgrind, instrumentation off
    until the cycle switches it on."""
    counts = folder / f"callgrind-{world['n']}.out"
    return subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={counts}",
            sys.executable,
            __file__,
            "--cycle",
            str(folder),
            json.dumps(world),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def build(folder: Path) -> None:
    """The two worlds in `folder`/worlds.sqlite3; prints what the cycles need to find them."""
    sys.path.insert(0, str(BENCH))
    from bench_dispatch import SETTINGS

    os.environ.update(SETTINGS, LOG_LEVEL="WARNING")
    from _setup import django_at

    django_at(f"sqlite:///{folder / 'worlds.sqlite3'}", folder / "build")
    from bench_dispatch import build as build_world
    from django.db import connection

    made = {
        str(n): {"device_id": build_world(n, rows, listings).device_id}
        for n, rows, listings in WORLDS
    }
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # what bench_dispatch.py does after building
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        made["built"] = cursor.fetchone()[0]
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # one file to copy
    print(json.dumps(made))


def cycle(folder: Path, world: dict) -> None:
    """One warm-up cycle, then one counted, on a copy of the worlds' database."""
    import gc

    sys.path.insert(0, str(BENCH))
    from bench_dispatch import SETTINGS

    os.environ.update(SETTINGS, LOG_LEVEL="WARNING")
    database = folder / f"cycle-{world['n']}.sqlite3"
    shutil.copyfile(folder / "worlds.sqlite3", database)
    from _setup import django_at

    django_at(f"sqlite:///{database}", folder / f"var-{world['n']}")
    import bench_dispatch

    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES

    # As a django-q2 worker does at spawn, and bench_dispatch.py before its rounds.
    freeze_loaded(["outbox.tasks"], WORKER_REGISTRIES)
    measured = bench_dispatch.World(
        world["n"], world["rows"], world["listings"], world["device_id"]
    )
    bench_dispatch.reset(measured, world["built"])
    bench_dispatch.ours(measured)  # warm-up
    bench_dispatch.reset(measured, world["built"])
    gc.collect()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "--instr=on", pid], check=True, capture_output=True)
    bench_dispatch.ours(measured)
    subprocess.run(["callgrind_control", "--instr=off", pid], check=True, capture_output=True)
    print("counted", flush=True)


if __name__ == "__main__":
    sys.exit(main())
