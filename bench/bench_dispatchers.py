"""Dispatch capacity: rows/s with 1, 2 and 4 dispatcher processes side by side, on the path
production takes — each row's re-check through the Rakuten adapter over HTTP to a fake Ichiba
on 127.0.0.1 (bench/_ichiba.py), one application id at Rakuten's 1 request/s shared by the
processes through the fleet's budget in Redis (`REDIS_URL`, as production runs several
dispatchers), then the real Web Push channel (encryption, VAPID, keep-alive HTTP) to a
loopback push service that answers 201 after 50 ms — on PostgreSQL (a database this bench
creates and drops) and SQLite.

The 100 listings are offers of 5 products, 20 shops each: the re-check of a batch's rows on
offers of one product asks one page of the product's offers (`watches.products.refetch`), so
a run asks a few pages, not a request a listing. Every listing was last polled
longer ago than OUTBOX_REFETCH_MAX_AGE, so each run asks the marketplace again; the fake's
catalogue does not change between runs. The fake and the push service run in this process
(no Django), the dispatchers in their own. It prints the requests each run made, the most one
second of the id saw and how many the fake refused (429): it must refuse none. The Redis keys
the dispatchers leave (the budget's, the caches') are deleted at the end; without Redis the
bench says so and measures one process, whose budget is its own.

Each round runs every (database, processes) pair once, in turn (A/B/A/B…), over the same due
rows reset between runs; the figures are medians over the rounds, a ratio the median of each
round's ratio to that round's one process. A run's time is from the
moment all its processes are set up and told to go until the last one finds nothing to claim.
Processes are what OUTBOX_DISPATCHERS adds on PostgreSQL (each a qcluster worker, of this host
or another); SQLite is measured for comparison — its schedule keeps one dispatcher.

    .venv/bin/python bench/bench_dispatchers.py [ROWS] [ROUNDS]    # Redis: $BENCH_REDIS_URL
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _ichiba import OFFERS_PER_PRODUCT, RATE, rakuten_env, rakuten_offers, start_ichiba, stock
from _push import due_webpush_rows, start_slow_push_service, webpush_devices
from _reset import reset_due, settle
from _setup import PG_SERVER, postgres_available

ROOT = Path(__file__).resolve().parent.parent
_ARGS = sys.argv[1:] if len(sys.argv) > 1 and sys.argv[1].isdigit() else []
# The children are told the row count by the bench, through the environment.
ROWS = int(os.environ.get("BENCH_ROWS") or (_ARGS[0] if _ARGS else 2_000))
ROUNDS = int(_ARGS[1]) if len(_ARGS) > 1 else 3
PROCESSES = (1, 2, 4)
LATENCY = 0.05
# One device per row: every row is its own push, as when people each watch a few things.
# (Fewer devices make digests — one push for a device's rows of a batch — and the bench then
# measures bookkeeping CPU on two cores rather than delivery waiting on the push service.)
DEVICES = ROWS
LISTINGS = 100
# Smaller than the default 500, so 2,000 rows give each of 4 processes more than one batch.
BATCH = 250
# The fleet's budget and caches, in a Redis database no test uses (tests take 0, 12 and 13;
# bench_pages' example 14). Every key of ours there starts with "yasugoro".
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")


# --- children (Django) -------------------------------------------------------------------


def _django() -> None:
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def build(origin: str) -> None:
    """Migrate; ROWS watches over the LISTINGS Rakuten offers the fake stocks (`_ichiba.stock`)
    and DEVICES Web Push devices, one due row each."""
    _django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("vapid_keys", "--ensure", verbosity=0, stdout=io.StringIO())
    listings = rakuten_offers(LISTINGS)
    devices = webpush_devices(origin, "bench", DEVICES)
    due_webpush_rows(devices, listings, ROWS)


def reset() -> None:
    """Every row due again, every watch without a baseline."""
    _django()
    import datetime as dt

    from django.utils import timezone

    reset_due(timezone.now() - dt.timedelta(seconds=1))
    # Every run starts as the first: each listing last polled longer ago than
    # OUTBOX_REFETCH_MAX_AGE, so it is asked again. Reused from the run before, seconds
    # earlier, a value near the bound aged past it during its delivery: retried later
    # (`fresh_value_expired`), after the run's processes had stopped — rows left unsent.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE watches_listing SET last_polled_at = %s",
            [timezone.now() - dt.timedelta(minutes=2)],
        )
    # Each round rewrites every row and watch; without this, later rounds ran slower than
    # earlier ones on PostgreSQL (x4: 3.22 -> 2.62 -> 2.34).
    settle()


def dispatch(ready: Path, go: Path) -> None:
    """One dispatcher process: cycles until one finds nothing to claim; prints what it sent."""
    _django()
    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES
    from outbox.dispatch import run_cycle

    freeze_loaded(["outbox.tasks"], WORKER_REGISTRIES)  # as a worker does at spawn (outbox.apps)
    ready.touch()
    while not go.exists():
        time.sleep(0.002)
    sent, cpu = 0, time.process_time()
    while True:
        result = run_cycle()
        sent += result.as_json()["sent"]
        if result.claimed == 0:
            break
    print(json.dumps({"sent": sent, "cpu": time.process_time() - cpu}), flush=True)


# --- the bench (no Django) ---------------------------------------------------------------


def child(env: dict[str, str], *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *args], env=env, **popen)


def run(env: dict[str, str], processes: int, folder: Path) -> tuple[float, float, int]:
    """Rows/s of `processes` dispatchers started together, the CPU seconds they used (all
    threads) per row, and the rows they sent."""
    if child(env, "--reset").wait() != 0:
        raise SystemExit("reset failed")
    go = folder / "go"
    go.unlink(missing_ok=True)
    readies = [folder / f"ready-{n}" for n in range(processes)]
    for ready in readies:
        ready.unlink(missing_ok=True)
    procs = [
        child(env, "--dispatch", str(ready), str(go), stdout=subprocess.PIPE, text=True)
        for ready in readies
    ]
    while not all(ready.exists() for ready in readies):
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a dispatcher died while starting")
        time.sleep(0.01)
    started = time.perf_counter()
    go.touch()
    outputs = [p.communicate()[0] for p in procs]
    elapsed = time.perf_counter() - started
    totals = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    sent = sum(total["sent"] for total in totals)
    cpu = sum(total["cpu"] for total in totals)
    return sent / elapsed, cpu / max(sent, 1), sent


def fleet_redis():
    """The Redis client of the fleet's budget, every key of ours in it deleted; None, having
    said so, when Redis does not answer."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        print(
            f"Redis is not reachable at {REDIS_URL} ({type(exc).__name__}): several "
            "dispatchers need the fleet's shared budget; measuring one process only, its "
            "budget its own"
        )
        return None
    clean(client)  # a budget a killed run left lowered would slow this one
    return client


def clean(client) -> None:
    for key in client.scan_iter(match="yasugoro*", count=1000):
        client.delete(key)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="yasugoro-dispatchers-"))
    server, origin = start_slow_push_service(LATENCY)
    fake = start_ichiba(RATE)
    stock(fake, LISTINGS)
    redis_client = fleet_redis()
    processes_measured = PROCESSES if redis_client is not None else PROCESSES[:1]
    base = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "yasugoro.settings",
        # Production settings: DEBUG would keep a log of every query.
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "VAPID_SUBJECT": "mailto:bench@example.invalid",
        "YASUGORO_VAR_DIR": str(folder),
        "PUSH_SERVICE_HOSTS": origin,
        "OUTBOX_BATCH_SIZE": str(BATCH),
        "OUTBOX_CYCLE_SECONDS": "3600",
        "BENCH_ROWS": str(ROWS),
        **rakuten_env(fake, RATE),
        "REDIS_URL": REDIS_URL if redis_client is not None else "",
    }
    base.pop("RAKUTEN_APP_IDS", None)  # one id: the one rakuten_env gives
    databases = {"sqlite": f"sqlite:///{folder / 'bench.sqlite3'}"}
    database = f"yasugoro_bench_scaleb_dispatchers_{os.getpid()}"
    admin = ["psql", f"{PG_SERVER}/postgres", "-q", "-c"]
    if postgres_available():
        subprocess.run([*admin, f'CREATE DATABASE "{database}"'], check=True)
        databases = {"postgresql": f"{PG_SERVER}/{database}", **databases}
    else:
        print("PostgreSQL is not reachable: measuring SQLite only")
    try:
        envs = {vendor: {**base, "DATABASE_URL": url} for vendor, url in databases.items()}
        for env in envs.values():
            if child(env, "--build", origin).wait() != 0:
                raise SystemExit("build failed")
        rates: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[float]] = {}
        asked: dict[tuple[str, int], list[int]] = {}
        for round_no in range(ROUNDS):
            for vendor, env in envs.items():
                for processes in processes_measured:
                    requests_before, refused_before = len(fake.requests), fake.too_many
                    rate, per_row, sent = run(env, processes, folder)
                    requests = len(fake.requests) - requests_before
                    refused = fake.too_many - refused_before
                    assert sent == ROWS, f"{vendor} ×{processes}: {sent} of {ROWS} sent"
                    rates.setdefault((vendor, processes), []).append(rate)
                    cpu.setdefault((vendor, processes), []).append(per_row)
                    asked.setdefault((vendor, processes), []).append(requests)
                    print(
                        f"  round {round_no + 1} {vendor:10} ×{processes}: {rate:7.1f} rows/s, "
                        f"{per_row * 1000:.1f} CPU ms a row, {requests} marketplace requests"
                        f"{f' ({refused} refused)' if refused else ''}, load "
                        f"{os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
        load = os.getloadavg()
        print(
            f"\nrows: {ROWS} (Web Push, {DEVICES} devices, {LISTINGS} Rakuten offers of "
            f"{-(-LISTINGS // OFFERS_PER_PRODUCT)} products), one id at {RATE} request/s "
            f"({'shared through Redis' if redis_client is not None else 'no Redis'}), push "
            f"service {LATENCY * 1000:.0f} ms, batch {BATCH}, 8 delivery threads a process, "
            f"{ROUNDS} interleaved rounds, medians; load average {load[0]:.1f} on "
            f"{os.cpu_count()} cores"
        )
        for vendor in envs:
            ones = rates[(vendor, 1)]
            cells = []
            for processes in processes_measured:
                runs = rates[(vendor, processes)]
                # Each round's ratio to that round's one process, then their median.
                ratio = statistics.median(r / one for r, one in zip(runs, ones, strict=True))
                cells.append(f"×{processes} {statistics.median(runs):7.1f} rows/s ({ratio:.2f}×)")
            print(f"{vendor:10}  " + "   ".join(cells))
            counts = "   ".join(
                f"×{processes} {statistics.median(asked[(vendor, processes)]):.0f}"
                for processes in processes_measured
            )
            print(f"{'':10}  marketplace requests a run: {counts}")
            per_row = statistics.median(cpu[(vendor, 1)])
            print(
                f"{'':10}  {per_row * 1000:.1f} CPU ms a row in one process: at most "
                f"{1 / per_row:.0f} rows/s per free core"
            )
        busiest = fake.max_per_second()
        print(
            f"fake Ichiba: {len(fake.requests)} requests, at most "
            f"{max(busiest.values(), default=0)} in one second of the id "
            f"(allowance {fake.per_second}), {fake.too_many} refused (429)"
        )
    finally:
        server.shutdown()
        fake.stop()
        if redis_client is not None:
            clean(redis_client)
        if "postgresql" in databases:
            subprocess.run([*admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'])
        subprocess.run(["rm", "-rf", str(folder)])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--build":
        build(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "--reset":
        reset()
    elif len(sys.argv) > 1 and sys.argv[1] == "--dispatch":
        dispatch(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
