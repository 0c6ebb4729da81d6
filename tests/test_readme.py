"""The newcomer's path: every command of the README's command table, run exactly as printed
(through bash, from the checkout) in its order, on a fresh database, exits 0. A long-running
one (the cluster) must start, then stop cleanly on Ctrl-C. The first screen's "See a
notification happen" does what its comments say. Also: `make run` on a busy port fails at
once, with a message."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LONG_RUNNING = ("manage.py qcluster",)
# What a newcomer's shell does not have: the test run's own settings.
NOT_A_NEWCOMERS = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "TEST_DATABASE_NAME",
    "VAPID_SUBJECT",
    "REDIS_URL",
    "DEBUG",
)


def table_commands() -> list[str]:
    """The first column of the table under "## Commands", in order."""
    section = README.read_text().split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)


@pytest.fixture
def newcomer(tmp_path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in NOT_A_NEWCOMERS}
    env["YASUGORO_VAR_DIR"] = str(tmp_path / "var")  # a fresh database, keys and cache
    return env


def as_printed(command: str) -> str:
    # A checkout tested from another interpreter than .venv (an IDE, tox) runs that one.
    if not (ROOT / ".venv" / "bin" / "python").exists():
        command = command.replace(".venv/bin/python", sys.executable)
    return command


def test_the_table_lists_the_commands_a_newcomer_needs():
    commands = table_commands()
    assert len(commands) >= 10
    assert commands[0].endswith("manage.py migrate"), "a fresh database is migrated first"
    assert all(command.startswith("DEBUG=1 .venv/bin/python manage.py ") for command in commands)


def test_every_command_of_the_table_runs_as_printed_on_a_fresh_database(newcomer):
    failures = {}
    for command in table_commands():
        if command.endswith(LONG_RUNNING):
            continue
        done = subprocess.run(
            ["bash", "-c", as_printed(command)],
            cwd=ROOT,
            env=newcomer,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            failures[command] = (done.returncode, done.stderr[-2000:])
    assert failures == {}


def test_see_a_notification_happen_prints_what_its_comments_promise(newcomer):
    section = README.read_text().split("\n## See a notification happen\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    setup = ["manage.py migrate", "manage.py seed_demo"]
    for command in (f"DEBUG=1 .venv/bin/python {step}" for step in setup):
        subprocess.run(
            ["bash", "-c", as_printed(command)],
            cwd=ROOT,
            env=newcomer,
            check=True,
            capture_output=True,
            timeout=300,
        )
    promised_any = False
    for line in lines:
        command, _, comment = line.partition("#")
        done = subprocess.run(
            ["bash", "-c", as_printed(command)],
            cwd=ROOT,
            env=newcomer,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (line, done.stderr[-2000:])
        promised = dict(re.findall(r'"(\w+)": (\d+)', comment))
        if promised:
            promised_any = True
            printed = json.loads(done.stdout.strip().splitlines()[-1])
            assert {key: printed[key] for key in promised} == {
                key: int(value) for key, value in promised.items()
            }, line
    assert promised_any, "the recipe's comments say what each step prints"


def test_the_cluster_command_starts_and_stops_cleanly_on_ctrl_c(newcomer):
    (command,) = [c for c in table_commands() if c.endswith(LONG_RUNNING)]
    migrate = table_commands()[0]
    subprocess.run(["bash", "-c", as_printed(migrate)], cwd=ROOT, env=newcomer, check=True)
    cluster = subprocess.Popen(
        ["bash", "-c", as_printed(command)],
        cwd=ROOT,
        env=newcomer,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        # Wait for its own word that it runs (bounded, so a broken start fails the test).
        deadline = time.monotonic() + 120
        for line in cluster.stdout:
            seen.append(line)
            if "running" in line.lower() or time.monotonic() > deadline:
                break
        assert any("running" in line.lower() for line in seen), "".join(seen[-20:])
        os.killpg(cluster.pid, signal.SIGINT)
        assert cluster.wait(timeout=60) == 0, "".join(seen[-20:])
    finally:
        if cluster.poll() is None:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait()


def test_make_run_on_a_busy_port_fails_at_once_with_a_message(newcomer):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            ["make", "run", f"PORT={port}"],
            cwd=ROOT,
            env=newcomer,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode != 0
    assert f"port {port} on 127.0.0.1 is busy" in done.stderr
    assert not (Path(newcomer["YASUGORO_VAR_DIR"]) / "yasugoro.sqlite3").exists(), (
        "it stopped before touching anything"
    )


def test_a_missing_production_setting_is_one_line(newcomer):
    done = subprocess.run(
        [sys.executable, "manage.py", "demo_market", "list"],
        cwd=ROOT,
        env=newcomer,  # no DEBUG, no VAPID_SUBJECT
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "VAPID_SUBJECT" in done.stderr and "DEBUG=1" in done.stderr
    assert "Traceback" not in done.stderr
