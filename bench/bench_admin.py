"""Admin on a big outbox: the changelist and the overview beside a bare `SELECT count(*)`.

Builds 1,000,000 outbox rows (a realistic mix: mostly sent, a fifth dropped for various
reasons, a few failed, and a live queue of pending / retry / sending rows from the last day)
in a temporary SQLite file, then renders the admin pages through Django's test client as a
superuser and prints the median times and their ratio to `SELECT count(*)` on the same table.

    .venv/bin/python bench/bench_admin.py [--rows 1000000] [--repeat 5] [--reuse] [--explain]

`--reuse` keeps the database between runs (it lives in $BENCH_DIR, default
/tmp/yasugoro-bench-admin), so you can time again without building it again. Each page is
timed on the database as built (no SQLite planner statistics), then again after the daily
retention job's ANALYZE. `--explain` prints the overview's query plans.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import random
import statistics
import sys
import tempfile
import time
import zoneinfo
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = Path(
    os.environ.get("BENCH_DIR") or Path(tempfile.gettempdir()) / "yasugoro-bench-admin"
)
DB_PATH = BENCH_DIR / "bench.sqlite3"

WATCHES = 10_000
LISTINGS = 1_000
DISPATCH_RUNS = 20_000
ZONE = zoneinfo.ZoneInfo("Asia/Tokyo")

# Old rows end in one of these; weights are per 1,000.
TERMINAL_MIX = [
    (("sent", "delivered"), 770),
    (("dropped", "condition_lost"), 90),
    (("dropped", "already_notified"), 40),
    (("dropped", "out_of_stock"), 30),
    (("dropped", "watch_removed"), 20),
    (("dropped", "no_subscription"), 15),
    (("dropped", "subscription_gone"), 10),
    (("dropped", "listing_paused"), 3),
    (("dropped", "item_not_found"), 1),
    (("dropped", "watch_paused"), 1),
    (("dropped", "manual"), 1),
    (("failed", "deliver_server"), 8),
    (("failed", "refetch_network"), 5),
    (("failed", "deliver_rejected"), 3),
    (("failed", "lease_expired"), 2),
]
# The last day's rows are partly still in the queue.
LIVE_MIX = [
    (("pending", ""), 250),
    (("retry", "refetch_rate_limited"), 40),
    (("retry", "deliver_network"), 30),
    (("retry", "deliver_server"), 20),
    (("sending", "claimed"), 20),
    *TERMINAL_MIX,
]


def setup_django() -> None:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{DB_PATH}"
    os.environ["YASUGORO_VAR_DIR"] = str(BENCH_DIR)
    os.environ["DJANGO_SETTINGS_MODULE"] = "yasugoro.settings_test"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def build(rows: int, seed: int = 5) -> None:
    """Migrate a fresh database and fill it. Plain executemany inside one transaction: the
    ORM would take minutes for a million rows."""
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from outbox.models import DispatchRun
    from watches.models import Device, Listing, Watch

    for suffix in ("", "-wal", "-shm"):
        Path(f"{DB_PATH}{suffix}").unlink(missing_ok=True)
    call_command("migrate", verbosity=0)
    rng = random.Random(seed)
    now = timezone.now()
    started = time.perf_counter()

    Listing.objects.bulk_create(
        Listing(
            source="demo",
            item_code=f"bench-{i}",
            name=f"ベンチ 商品 {i}",
            price=1000,
            last_polled_at=now,
        )
        for i in range(LISTINGS)
    )
    Device.objects.bulk_create(
        Device(
            token_hash=f"{i:064x}",
            channel="webpush",
            push_active=i % 10 != 0,
            push_endpoint=f"https://push.example.test/{i}",
        )
        for i in range(WATCHES)
    )
    listing_ids = list(Listing.objects.order_by("id").values_list("id", flat=True))
    device_ids = list(Device.objects.order_by("id").values_list("id", flat=True))
    Watch.objects.bulk_create(
        Watch(
            device_id=device_ids[i],
            listing_id=listing_ids[i % LISTINGS],
            trigger="target_price",
            target_price=900,
        )
        for i in range(WATCHES)
    )
    watch_ids = list(Watch.objects.order_by("id").values_list("id", flat=True))

    adapt = connection.ops.adapt_datetimefield_value
    days = -(-rows // WATCHES)
    today = now.astimezone(ZONE).date()
    first_day = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time.min, tzinfo=ZONE)
    terminal = _picker(TERMINAL_MIX, rng)
    live = _picker(LIVE_MIX, rng)
    columns = (
        "watch_id, device_id, channel, trigger, status, previous_status, reason, detail, "
        "detected_at, detected_payload, sent_message, retry_count, attempts, next_attempt_at, "
        "claimed_at, claimed_by, sent_at, created_at, updated_at"
    )
    sql = f"INSERT INTO outbox_outbox ({columns}) VALUES ({', '.join(['%s'] * 19)})"
    batch: list[tuple] = []
    with transaction.atomic(), connection.cursor() as cursor:
        for i in range(rows):
            day, w = divmod(i, WATCHES)
            # One row per watch per service day: the dedup index never folds one.
            detected = first_day + dt.timedelta(days=day, seconds=rng.randrange(86_400))
            detected = min(detected, now - dt.timedelta(seconds=rng.randrange(60, 3_600)))
            recent = now - detected < dt.timedelta(days=1)
            status, reason = (live if recent else terminal)()
            moved = detected + dt.timedelta(seconds=rng.randrange(5, 3_600))
            moved = min(moved, now)
            retry_count, next_attempt, claimed_at, claimed_by, sent_at = 0, moved, None, "", None
            previous = "sending"
            if status == "pending":
                moved, next_attempt, previous = detected, detected, ""
            elif status == "retry":
                retry_count = rng.randrange(1, 6)
                next_attempt = moved + dt.timedelta(seconds=30 * 2**retry_count)
            elif status == "sending":
                claimed_at = now - dt.timedelta(seconds=rng.randrange(0, 900))
                claimed_by, moved, previous = "bench:1:x", claimed_at, "pending"
            elif status == "sent":
                sent_at = moved
            elif status == "failed":
                retry_count = 8
            payload = (
                f'{{"price": {rng.randrange(500, 2000)}, "in_stock": true, '
                f'"observed_at": "{detected.isoformat()}"}}'
            )
            message = '{"title": "ベンチ", "body": "¥900"}' if status == "sent" else None
            batch.append(
                (
                    watch_ids[w],
                    device_ids[w],
                    "webpush",
                    "target_price",
                    status,
                    previous,
                    reason,
                    "",
                    adapt(detected),
                    payload,
                    message,
                    retry_count,
                    1,
                    adapt(next_attempt),
                    adapt(claimed_at) if claimed_at else None,
                    claimed_by,
                    adapt(sent_at) if sent_at else None,
                    adapt(detected),
                    adapt(moved),
                )
            )
            if len(batch) >= 50_000:
                cursor.executemany(sql, batch)
                batch.clear()
        if batch:
            cursor.executemany(sql, batch)
    DispatchRun.objects.bulk_create(
        (
            DispatchRun(
                started_at=now - dt.timedelta(minutes=i),
                finished_at=now - dt.timedelta(minutes=i),
                holder="bench:1:x",
                claimed=10,
                sent=8,
                dropped=2,
            )
            for i in range(DISPATCH_RUNS)
        ),
        batch_size=500,
    )
    print(f"built {rows:,} outbox rows in {time.perf_counter() - started:.1f} s", flush=True)


def _picker(mix, rng: random.Random):
    choices = [item for item, _ in mix]
    weights = [weight for _, weight in mix]

    def pick():
        return rng.choices(choices, weights)[0]

    return pick


def _median_seconds(fn, repeat: int) -> float:
    fn()  # warm the page cache and Django's template cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(repeat: int) -> None:
    """Time each page twice: on the database as built (SQLite has no planner statistics
    yet), then after the daily retention job's ANALYZE, as a live system has them."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from outbox.models import Outbox
    from outbox.retention import refresh_planner_statistics

    users = get_user_model().objects
    user = users.filter(username="bench").first() or users.create_superuser("bench", "", "bench")
    client = Client()
    client.force_login(user)
    total = Outbox.objects.count()

    def count_star() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM outbox_outbox")
            cursor.fetchone()

    def page(url: str):
        def get() -> None:
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"GET {url} answered {response.status_code}")

        return get

    def command() -> None:
        call_command("outbox_stats", "--json", stdout=io.StringIO())

    some_id = Outbox.objects.filter(status="sent").values_list("id", flat=True).first()
    timed = [
        ("changelist (overview on top)", page("/admin/outbox/outbox/")),
        ("overview page", page("/admin/outbox/outbox/overview/")),
        ("outbox_stats --json", command),
        ("changelist ?status=failed", page("/admin/outbox/outbox/?status__exact=failed")),
        ("changelist ?status=sent, page 50", page("/admin/outbox/outbox/?status__exact=sent&p=50")),
        ("changelist ?queue=due", page("/admin/outbox/outbox/?queue=due")),
        ("changelist search item code", page("/admin/outbox/outbox/?q=bench-17")),
        ("detail page", page(f"/admin/outbox/outbox/{some_id}/change/")),
    ]
    _drop_planner_statistics()
    print(f"outbox rows: {total:,}; median of {repeat} runs after one warm-up; ratio to count(*)")
    for title in ("as built: no planner statistics", "after the retention job's ANALYZE"):
        if title.startswith("after"):
            refresh_planner_statistics()
        print(f"-- {title}")
        base = _median_seconds(count_star, repeat)
        print(f"   {'SELECT count(*) FROM outbox_outbox':<38} {base * 1000:8.1f} ms    1.0×")
        for label, fn in timed:
            seconds = _median_seconds(fn, repeat)
            print(f"   {label:<38} {seconds * 1000:8.1f} ms {seconds / base:6.1f}×", flush=True)


def _drop_planner_statistics() -> None:
    """A reused database may carry the statistics of a previous run."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS sqlite_stat1")
    connection.close()  # the planner reads statistics when a connection opens


def _explain() -> None:
    from django.db import connection

    from outbox.stats import outbox_stats

    with connection.execute_wrapper(_print_plan):
        outbox_stats()


def _print_plan(execute, sql, params, many, context):
    # The database's own cursor: Django's wrapper would run this very wrapper again.
    cursor = context["cursor"].cursor
    cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
    print("--", sql[:160])
    for row in cursor.fetchall():
        print("   ", row[-1])
    return execute(sql, params, many, context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep an existing bench database")
    parser.add_argument("--explain", action="store_true", help="print the overview's query plans")
    args = parser.parse_args()
    setup_django()
    if not (args.reuse and DB_PATH.exists()):
        build(args.rows)
    measure(args.repeat)
    if args.explain:
        _explain()


if __name__ == "__main__":
    main()
