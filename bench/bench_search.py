"""Search at 100,000 listings: the page's search (folded words against the FTS5 trigram index
on SQLite, the pg_trgm GIN index on PostgreSQL) beside a plain `name LIKE '%word%'` scan doing
the same work as the page — take the first SEARCH_CAP + 1 matches (the count: "1000+"), and
show the first page of 20 of those in name order — on SQLite and on PostgreSQL (a database
the bench creates and drops). Interleaved rounds (ours, the scan, ours, …), the p95 of each
round's query times, the median over rounds, and the ratio; the load average beside them.

    .venv/bin/python bench/bench_search.py [ROUNDS]

The listings' names are the demo catalogue's, each with a variant word and a serial number;
their search text is computed once per (name, variant) and the serial appended, which is
what `for_listing` would give (set-up, not measured).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

LISTINGS = 100_000
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
REPEAT = 5  # each query, per round
# (what a person types, what a plain LIKE scan would look for: the same word as typed)
QUERIES = [
    "すこってぃ",  # hiragana for スコッティ: the scan finds nothing, ours finds it
    "スコッティ",
    "coffee",
    "toilet paper",
    "洗剤",  # two characters: below the trigram length
    "詰め替え",
    "ちゅーる",
    "tennensui",
    "kleenex",
    "お徳用",
    "No.77777",  # one listing
    "水",
]
VARIANTS = [
    "まとめ買い",
    "お徳用",
    "限定",
    "ケース販売",
    "セット",
    "大容量",
    "新パッケージ",
    "訳あり",
]


def build() -> None:
    from django.db import connection

    from demo.catalogue import CATALOGUE
    from watches.models import Listing
    from watches.search.text import fold, for_listing

    texts = {
        (item.code, variant): for_listing(f"{item.name} {variant}", item.category)
        for item in CATALOGUE
        for variant in VARIANTS
    }
    rows = []
    for i in range(LISTINGS):
        item = CATALOGUE[i % len(CATALOGUE)]
        variant = VARIANTS[(i // len(CATALOGUE)) % len(VARIANTS)]
        serial = f"No.{i}"
        rows.append(
            Listing(
                source="demo",
                item_code=f"bench-{i}",
                name=f"{item.name} {variant} {serial}",
                category=item.category,
                price=item.price,
                shipping=0,
                in_stock=True,
                search_text=f"{texts[(item.code, variant)]} | {fold(serial)}",
            )
        )
    Listing.objects.bulk_create(rows, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def ours(query: str) -> tuple[int, list]:
    from watches.search.query import search_results

    found = search_results(query)
    return _first_page(found.listings)


def scan(query: str) -> tuple[int, list]:
    from watches.models import Listing
    from watches.search.query import SEARCH_CAP

    results = Listing.objects.filter(paused=False)
    for word in query.split():
        results = results.filter(name__contains=word)  # LIKE '%word%'
    ids = list(results.values_list("id", flat=True)[: SEARCH_CAP + 1])
    return _first_page(Listing.objects.filter(id__in=ids[:SEARCH_CAP]).order_by("name", "id"))


def _first_page(listings) -> tuple[int, list]:
    """What the page does with the listings found: count them, read the first 20."""
    from django.core.paginator import Paginator

    page = Paginator(listings, 20).get_page(1)
    return page.paginator.count, [listing.id for listing in page]


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]


def run_one(vendor: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _setup import django_on_temp_postgres, django_on_temp_sqlite

    if vendor == "sqlite":
        django_on_temp_sqlite("search")
    else:
        django_on_temp_postgres("search")
    started = time.perf_counter()
    build()
    print(
        f"[{vendor}] {LISTINGS:,} listings (set-up {time.perf_counter() - started:.0f} s); "
        "each search counts at most 1,000 matches, as the page does"
    )
    found = {query: (ours(query)[0], scan(query)[0]) for query in QUERIES}
    for query, (a, b) in found.items():
        print(f"[{vendor}]   {query!r:<16} ours finds {a:>6,}   the scan finds {b:>6,}")
    rounds: dict[str, list[float]] = {"ours": [], "scan": []}
    for _ in range(ROUNDS):
        for label, path in (("ours", ours), ("scan", scan)):
            times = []
            for query in QUERIES:
                for _ in range(REPEAT):
                    start = time.perf_counter()
                    path(query)
                    times.append((time.perf_counter() - start) * 1000)
            rounds[label].append(p95(times))
    ours_p95 = statistics.median(rounds["ours"])
    scan_p95 = statistics.median(rounds["scan"])
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"[{vendor}] p95 per query (median of {ROUNDS} rounds): ours {ours_p95:.1f} ms, "
        f"LIKE scan {scan_p95:.1f} ms; ratio ours/scan {ours_p95 / scan_p95:.2f} "
        f"(load average {load})"
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[2] in ("sqlite", "postgresql"):
        run_one(sys.argv[2])
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _setup import each_database

    each_database(__file__, [str(ROUNDS)])


main()
