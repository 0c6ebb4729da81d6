"""Against the peer: the same 10,000 notifications through django-post-office's
`send_queued_mail` and through our dispatcher, in the same run, on SQLite and PostgreSQL.

- post-office (the nearest peer: a queue of mails in the database, a command that sends them
  in batches): 10,000 queued mails, sent by `send_queued_mail_until_done` — what
  `manage.py send_queued_mail` runs — with its defaults (batch of 100, 5 threads, a log row
  per sent mail, its lock file) and Django's locmem mail backend;
- ours: 10,000 due outbox rows on the console channel (logged at INFO, below the bench's
  WARNING: as cheap as a channel gets, like locmem), sent by one dispatcher cycle with
  everything that post-office does not do — claim with a fence, guards, a re-fetch of every
  listing from the demo marketplace (each listing as the poll that detected its rows left it
  two minutes before: too old to reuse, so every round asks), the observation rule (listing
  state, price points, typical price and 90-day low over HISTORY_DAYS of history), the
  re-check, the lease's intent, the events with their JSON, the watches' baselines.

Both sides share one database the bench makes: a SQLite file (WAL, as the project configures
it) in var/, and a PostgreSQL database `yasugoro_bench_peer_*` it creates on $BENCH_PG_URL and
drops at exit (skipped with a message when no server answers). One child process per database
and listing count: 10,000 watches over 100 listings (100 watches a listing), 2,000 (5) and
6,667 (1–2). Within a child the sides alternate (ours, post-office, ours, …) for ROUNDS rounds
over the same rows, reset between runs; printed are medians and the median of the per-round
ratios, wall and CPU (this process, all threads).

post-office is a bench-only requirement (bench/requirements-bench.txt): when it is missing,
the bench installs it into var/bench-packages (the project's venv stays as it is), or says why
it cannot and skips.

    .venv/bin/python bench/bench_peer.py [ROWS] [ROUNDS] [LISTINGS,LISTINGS,…]
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "var" / "bench-packages"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-bench.txt"
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
LISTINGS = (100, 2_000, 6_667)
DEVICES = 50
# 90 days of history, two points a day: what the re-fetch's observation rule reads and keeps.
HISTORY_DAYS, POINTS_PER_DAY = 90, 2


# --- the bench (no Django) ---------------------------------------------------------------


def post_office_ready() -> bool:
    """Whether post-office imports from var/bench-packages, installing it there first."""
    # Found, not imported: post-office reads Django's settings as it is imported.
    check = [sys.executable, "-c", "import importlib.util as u; assert u.find_spec('post_office')"]
    env = {**os.environ, "PYTHONPATH": str(PACKAGES)}
    if subprocess.run(check, env=env, capture_output=True).returncode == 0:
        return True
    print(f"installing {REQUIREMENTS.name} into {PACKAGES.relative_to(ROOT)} …", flush=True)
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",  # pinned in the file; the venv's Django is the one both sides use
        "--target",
        str(PACKAGES),
        "-r",
        str(REQUIREMENTS),
    ]
    done = subprocess.run(install, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr.strip()[-2000:])
        return False
    return subprocess.run(check, env=env, capture_output=True).returncode == 0


def main() -> None:
    from _setup import postgres_available

    if not post_office_ready():
        print(f"SKIPPED: django-post-office could not be installed from {REQUIREMENTS.name}")
        return
    listing_counts: tuple[int, ...] = LISTINGS
    if len(sys.argv) > 3:
        listing_counts = tuple(int(n) for n in sys.argv[3].split(","))
    vendors = ["sqlite"] + (["postgresql"] if postgres_available() else [])
    if len(vendors) == 1:
        print("PostgreSQL is not reachable: measuring SQLite only")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGES), os.environ.get("PYTHONPATH")])),
        "DJANGO_SETTINGS_MODULE": "bench.peer_settings",
        # Production settings (DEBUG would keep a log of every query), the demo marketplace
        # in-process, no demo tick.
        "DEBUG": "0",
        "DEMO_MARKET": "1",
        "DEMO_TICK": "0",
        "LOG_LEVEL": "WARNING",
        "VAPID_SUBJECT": "mailto:bench@example.invalid",
        "OUTBOX_CYCLE_SECONDS": "3600",
    }
    print(
        f"{ROWS:,} notifications, {ROUNDS} rounds (ours / post-office alternating), medians; "
        f"{HISTORY_DAYS} days × {POINTS_PER_DAY} price points a listing"
    )
    for vendor in vendors:
        for listings in listing_counts:
            args = ["--child", vendor, str(listings), str(ROWS), str(ROUNDS)]
            subprocess.run([sys.executable, __file__, *args], env=env, check=False)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


# --- one child: one database, one listing count (Django) ---------------------------------


def child(vendor: str, listings: int, rows: int, rounds: int) -> None:
    from _setup import django_on_temp_postgres, django_on_temp_sqlite

    if vendor == "sqlite":
        django_on_temp_sqlite("peer", under=ROOT / "var")
    else:
        django_on_temp_postgres(f"peer_{listings}")
    folder = Path(os.environ["YASUGORO_VAR_DIR"])
    built = build(listings, rows)
    # As a django-q2 worker does at spawn (outbox.apps): what is loaded stays out of the
    # collector's walks — here for both sides, in this one process.
    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES

    freeze_loaded(["outbox.tasks", "post_office.mail"], WORKER_REGISTRIES)
    wall: dict[str, list[float]] = {"ours": [], "peer": []}
    cpu: dict[str, list[float]] = {"ours": [], "peer": []}
    for _ in range(rounds):
        sides = (("ours", lambda: ours(rows, built)), ("peer", lambda: peer(folder, rows)))
        for side, run in sides:
            seconds, cpu_seconds = run()
            wall[side].append(seconds)
            cpu[side].append(cpu_seconds)

    def ratio(times: dict[str, list[float]]) -> str:
        # ours / peer in rows per second: the peer's time over ours, per round.
        per_round = [p / o for o, p in zip(times["ours"], times["peer"], strict=True)]
        rounds_text = ", ".join(f"{r:.2f}" for r in per_round)
        return f"{statistics.median(per_round):.2f}×  (per round: {rounds_text})"

    ours_rate = rows / statistics.median(wall["ours"])
    peer_rate = rows / statistics.median(wall["peer"])
    per_listing = rows / listings
    print(
        f"\n{vendor}, {listings:,} listings ({per_listing:.1f} watches a listing):\n"
        f"  ours (dispatch cycle, console):     {ours_rate:>8,.0f} rows/s\n"
        f"  post-office send_queued_mail:       {peer_rate:>8,.0f} mails/s\n"
        f"  ratio ours / post-office, wall:     {ratio(wall)}\n"
        f"  ratio ours / post-office, CPU:      {ratio(cpu)}",
        flush=True,
    )


def build(listing_count: int, rows: int) -> int:
    """`listing_count` demo listings at ¥900 with their history, DEVICES console devices,
    `rows` target-price watches (¥950) spread over the listings, one due row each; and `rows`
    queued post-office mails saying the same. Returns the history's last price point."""
    from _world import due_rows, listings_with_history
    from django.db import connection
    from post_office import mail

    from watches.models import Channel, Device

    codes = [f"bench-{i}" for i in range(listing_count)]
    listings = listings_with_history(codes, HISTORY_DAYS, POINTS_PER_DAY)
    devices = Device.objects.bulk_create(
        Device(token_hash=f"bench-{i}", channel=Channel.CONSOLE) for i in range(DEVICES)
    )
    due_rows(devices, listings, rows, Channel.CONSOLE)
    mail.send_many(
        [
            {
                "sender": "bench@example.invalid",
                "recipients": [f"watcher-{i % DEVICES}@example.invalid"],
                "subject": f"bench item {i % listing_count} is ¥900 now",
                "message": f"bench item {i % listing_count}: ¥900 (your line ¥950). "
                f"http://127.0.0.1:8000/listings/{i % listing_count}/",
            }
            for i in range(rows)
        ]
    )
    with connection.cursor() as cursor:
        # Planner statistics, as PostgreSQL's autovacuum (and on SQLite the daily retention
        # job, for the outbox) keep them in production: without, PostgreSQL plans the due
        # select and the history reads for empty tables.
        cursor.execute("ANALYZE")
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        return cursor.fetchone()[0]


def ours(rows: int, built: int) -> tuple[float, float]:
    from _reset import reset_due, settle
    from _world import as_the_poll_left_them
    from django.utils import timezone

    from outbox.dispatch import run_cycle

    started = timezone.now()
    reset_due(started - dt.timedelta(seconds=1))
    as_the_poll_left_them(started, built)
    settle()
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_cycle()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sent = result.as_json()["sent"]
    assert sent == rows, f"ours: {sent} of {rows} sent"
    return wall, cpu


def peer(folder: Path, rows: int) -> tuple[float, float]:
    from _reset import settle
    from django.core import mail as django_mail
    from django.db import connection
    from post_office.mail import send_queued_mail_until_done
    from post_office.models import STATUS, Email

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM post_office_log")
        cursor.execute("UPDATE post_office_email SET status = %s", [STATUS.queued])
    settle()  # as for ours
    django_mail.outbox = []
    wall, cpu = time.perf_counter(), time.process_time()
    send_queued_mail_until_done(lockfile=str(folder / "send_queued_mail"))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sent = Email.objects.filter(status=STATUS.sent).count()
    total = Email.objects.count()
    assert sent == total == rows == len(django_mail.outbox), f"post-office: {sent} of {total}"
    return wall, cpu


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
