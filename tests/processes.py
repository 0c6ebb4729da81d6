"""Yasugoro processes side by side, as one host runs them: each sets up, says it is ready,
waits for the go, then runs one dispatch cycle or one polling run and prints what it did.
Real processes on the test database (a file on SQLite, PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from tests.reliability.world import stop, wait_for

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    f"""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, {str(ROOT)!r})
    import django
    django.setup()
    from outbox.dispatch import run_cycle
    from watches.polling.poll import poll
    role, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    ready.touch()
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.002)
    result = run_cycle() if role == "dispatch" else poll()
    print(json.dumps(result.as_json()), flush=True)
    """
)


def together(env: dict[str, str], tmp_path: Path, name: str, roles: Sequence[str]) -> list[dict]:
    """Start one process per role ("dispatch" or "poll"), let them go at once, and return
    what each printed."""
    go = tmp_path / f"{name}-go"
    ready = [tmp_path / f"{name}-ready-{n}" for n in range(len(roles))]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, role, str(ready[n]), str(go)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for n, role in enumerate(roles)
    ]
    try:
        wait_for(ready, procs, timeout=60)
        go.touch()
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            stop(proc)
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
