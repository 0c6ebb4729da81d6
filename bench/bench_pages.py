"""Pages: `wrk` against the home page and a listing page, with 10,000 listings and 1,000,000
price points in the database, served by gunicorn (2 sync workers, DEBUG off, SQLite) —
requests/s and p99 latency, beside a minimal Django view on the same server (same middleware,
no database: `bench/pages_urls.py`). Each URL: a 2 s warm-up, then DURATION seconds.

    .venv/bin/python bench/bench_pages.py [DURATION]

Needs Debian's `wrk` (`make bench` installs it when missing).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from _setup import django_on_temp_sqlite

DURATION = int(sys.argv[1]) if len(sys.argv) > 1 else 10
LISTINGS = 10_000
POINTS = 1_000_000
ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ["トイレットペーパー", "洗剤", "コーヒー", "ペットフード", "ティッシュ", "シャンプー"]

if not shutil.which("wrk"):
    raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install -y wrk)")

os.environ.setdefault("VAPID_SUBJECT", "mailto:bench@yasugoro.example")
path = django_on_temp_sqlite("pages")

from django.db import connection
from django.utils import timezone

from watches.models import Listing


def build() -> int:
    """10,000 listings and 1,000,000 price points over 90 days (raw executemany: set-up,
    not measured); their typical price and 90-day low set from that history."""
    rng = random.Random(7)
    now = timezone.now()
    Listing.objects.bulk_create(
        (
            Listing(
                source="demo",
                item_code=f"bench-{i}",
                name=f"{CATEGORIES[i % len(CATEGORIES)]} 商品 No.{i} まとめ買い {i % 97}パック",
                category=CATEGORIES[i % len(CATEGORIES)],
                price=800 + rng.randrange(400),
                shipping=0,
                in_stock=True,
                units_per_pack=12,
                unit_label="roll",
                last_polled_at=now,
            )
            for i in range(LISTINGS)
        ),
        batch_size=1000,
    )
    ids = list(Listing.objects.order_by("id").values_list("id", flat=True))
    per_listing = POINTS // LISTINGS
    step = dt.timedelta(days=90) / per_listing
    adapt = connection.ops.adapt_datetimefield_value
    stamps = [adapt(now - step * k) for k in range(per_listing)]

    def points():
        for listing_id in ids:
            base = 800 + rng.randrange(400)
            for k in range(per_listing):
                yield listing_id, stamps[k], base + rng.randrange(-80, 80), 0, 1

    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany(
        "INSERT INTO watches_pricepoint (listing_id, observed_at, price, shipping, in_stock) "
        "VALUES (?, ?, ?, ?, ?)",
        points(),
    )
    raw.execute(
        "UPDATE watches_listing SET "
        "low_90 = (SELECT MIN(price) FROM watches_pricepoint p WHERE p.listing_id = watches_listing.id), "  # noqa: E501
        "typical_price = (SELECT CAST(AVG(price) AS INTEGER) FROM watches_pricepoint p "
        "WHERE p.listing_id = watches_listing.id)"
    )
    raw.execute("COMMIT")
    raw.execute("ANALYZE")
    count = raw.execute("SELECT COUNT(*) FROM watches_pricepoint").fetchone()[0]
    raw.close()
    return count


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.pages_settings",
        "DEBUG": "0",
        "SECRET_KEY": "bench-" + "x" * 50,
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "SECURE_HSTS_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }
    gunicorn = Path(sys.executable).with_name("gunicorn")
    proc = subprocess.Popen(
        [str(gunicorn), "yasugoro.wsgi", "--workers", "2", "--bind", f"127.0.0.1:{port}",
         "--log-level", "warning", "--chdir", str(ROOT)],
        env=env,
        cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not start")


def wrk(url: str, seconds: int) -> tuple[float, float, int]:
    """(requests/s, p99 ms, non-2xx) from `wrk --latency`, one thread, 4 connections."""
    out = subprocess.run(
        ["wrk", "-t1", "-c4", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 30,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = _ms(re.search(r"\s99%\s+([\d.]+\w+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, p99, int(bad.group(1)) if bad else 0


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> None:
    started = time.perf_counter()
    points = build()
    print(
        f"{Listing.objects.count():,} listings, {points:,} price points "
        f"(set-up {time.perf_counter() - started:.0f} s); gunicorn 2 workers, wrk -t1 -c4, "
        f"{DURATION} s per URL"
    )
    listing_id = Listing.objects.order_by("id").values_list("id", flat=True)[LISTINGS // 2]
    port = free_port()
    server = serve(port)
    base = f"http://127.0.0.1:{port}"
    urls = {
        "minimal view (baseline)": f"{base}/bench/minimal",
        "home": f"{base}/",
        "listing page": f"{base}/listings/{listing_id}/",
    }
    results = {}
    try:
        for label, url in urls.items():
            wrk(url, 2)  # warm-up: imports, template loading, connections
            results[label] = wrk(url, DURATION)
    finally:
        server.terminate()
        server.wait(15)
    for label, (rps, p99, bad) in results.items():
        errors = f"   NON-2xx: {bad}" if bad else ""
        print(f"{label:<26}{rps:>9.0f} req/s   p99 {p99:>7.1f} ms{errors}")
    floor_rps, floor_p99, _ = results["minimal view (baseline)"]
    for label in ("home", "listing page"):
        rps, p99, _ = results[label]
        print(
            f"ratio {label} / minimal: {rps / floor_rps:.2f} of the requests/s, "
            f"p99 {p99 / floor_p99:.1f}x"
        )
    if any(bad for _, _, bad in results.values()):
        raise SystemExit("some requests failed")


main()
