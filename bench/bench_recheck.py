#!/usr/bin/env python
"""The dispatcher's re-check under the real budget: how long a sale's backlog of due rows takes
to re-check and send with one Rakuten application id, item by item (the path before shop
feeds) beside the shop pages the re-check now reads.

The world: a sale made every watched listing of 200 shops cross its watch's target at once
(10 watched listings a shop, 2,000 in all, one watch and one due row each, on the console
channel of its own device). Each shop's catalogue holds 200 items; the sale's are the most
recently updated (their prices moved), the rest were updated earlier. The poll that detected
the rows saw the sale DETECTED_BEFORE the first dispatcher cycle, so every answer is older
than OUTBOX_REFETCH_MAX_AGE and the dispatcher asks again.

Real (the production code, on the bench's own SQLite database, or PostgreSQL with
`--db postgresql`, created and dropped by the bench), with the default settings:
- the dispatcher: `outbox.dispatch.run_cycle` (claims, guards, re-fetch, re-check, the send
  gate with OUTBOX_REFETCH_MAX_AGE, delivery, recording), a cycle at every simulated minute;
- the re-fetch: `watches.services.refetch_or_reuse` — `watches.polling.feeds.answer_together`
  and `watches.polling.observations.fetch` — through the Rakuten adapter over HTTP to a fake
  Ichiba on 127.0.0.1 (tests/fakes/ichiba.py: a shop's items most recently updated first),
  and the real `RateLimiter` of one application id at 1 request/s;
- the observation rule the re-fetch keeps its answers by.

Simulated:
- time: one clock drives the limiter (a wait moves it instead of sleeping), Django's clock
  (time-machine), the cycle's OUTBOX_CYCLE_SECONDS deadline (`outbox.dispatch` reads it from
  `time.monotonic`, which time-machine leaves alone: the bench hands it the simulated clock)
  and the fake Ichiba, which counts requests per application id per simulated second and
  answers 429 to a second one in a second;
- the schedule: one cycle at a time, each starting at the first whole minute after the last
  ended (or when the next row falls due); django-q2 may start the next minute's cycle beside
  a longer one, which shares the same id's budget: each batch's re-fetch only takes longer;
- the channel: a recorder that answers at once (tests/fakes/channel.py): the figures are the
  re-check's, not a push service's.

The two paths, side by side in one run, taking turns going first:
- items: the re-check as it was before shop feeds, one request an item. The switch is a
  `FeedCheck` row that contradicts the feeds (`feeds.trusted` is False): `answer_together`
  then answers nothing and every listing goes to `fetch`, the same call the re-check made
  before (POLL_SHAPES does not reach the re-check: it shapes the poll plan only);
- shop pages: the re-check as it is, feeds trusted (no FeedCheck yet).

Drained means every row sent or dropped (a failed row was never told); each side runs until
then or for `--horizon-minutes` of simulated time. `--batch-size` sets OUTBOX_BATCH_SIZE.

    .venv/bin/python bench/bench_recheck.py [--shops 200] [--watched 10] [--catalogue 200]
        [--rounds 3] [--horizon-minutes 15] [--batch-size 500] [--cycles] [--interleaved]
        [--db sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import statistics
import sys
import time
import types
from collections import Counter
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _clock import SimClock

T0 = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)  # noon in Tokyo: no quiet hours
APP_ID = "recheck-app"
RATE = 1.0  # requests/s per application id: Rakuten Ichiba's allowance
DETECTED_BEFORE = dt.timedelta(minutes=3)
TARGET = 950  # every watch's target price
BEFORE, SALE = 1000, 900  # the watched items' prices before and during the sale
PATHS = ("items", "shop pages")
GOAL_SECONDS = 600


def fake_ichiba(clock: SimClock):
    """The fake Ichiba (tests/fakes/ichiba.py), counting requests per application id per
    simulated second and answering 429 to one beyond RATE in a second."""
    from tests.fakes.ichiba import FakeIchiba

    class SimIchiba(FakeIchiba):
        def __init__(self) -> None:
            super().__init__()
            self.accept(APP_ID)
            self.by_second: Counter[tuple[str, int]] = Counter()

        def arrived(self, request):  # called under self.lock
            key = (request.query.get("applicationId", ""), math.floor(clock.now))
            self.by_second[key] += 1
            if self.by_second[key] > RATE:
                self.too_many += 1
                return dataclasses.replace(request, fault="rate_limited")
            return super().arrived(request)

        def stock(self, shops: int, watched: int, catalogue: int) -> None:
            """Every shop's catalogue, the sale's items updated last."""
            with self.lock:
                self.items.clear()
                self.stamps.clear()
                self.by_second.clear()
            for shop in range(shops):
                for n in range(catalogue - watched):
                    self.add(f"{shop_code(shop)}:other{n:04d}", price=2000 + n)
                for n in range(watched):
                    self.add(item_code(shop, n), price=BEFORE)
            for shop in range(shops):
                for n in range(watched):
                    self.set(item_code(shop, n), price=SALE)

    return SimIchiba().start()


def shop_code(shop: int) -> str:
    return f"shop{shop:04d}"


def item_code(shop: int, n: int) -> str:
    return f"{shop_code(shop)}:sale{n:03d}"


@dataclasses.dataclass
class Result:
    path: str
    # Simulated seconds from the first cycle until the last row was sent or dropped; None
    # when a row failed or was left waiting at the horizon.
    drained: float | None
    ended: float | None  # when the last row was sent, dropped or failed (None: none was)
    requests: int
    items: int
    pages: Counter[int]  # shop pages asked, by page number
    final: Counter[str]  # rows by final status (or the one they were left in)
    retries: Counter[str]  # retry events by reason
    busiest: dict[str, int]  # most requests one id made in one simulated second
    too_many: int  # answered 429
    fresh_sent: list[float]  # the sent rows' value ages at their delivery, seconds
    fresh_expired: list[float]  # ages the send gate refused, seconds
    held_back: str  # the first refusal's detail, as its event says it
    cycles: list[dict]
    wall: float


def main(argv: list[str] | None = None) -> list[Result]:
    args = _arguments(argv)
    os.environ.setdefault("DEBUG", "0")  # DEBUG would keep every query in memory
    os.environ.setdefault("DEMO_TICK", "0")
    os.environ.setdefault("DEMO_MARKET", "0")
    from tests.fakes.ichiba import key_for

    os.environ["RAKUTEN_APP_ID"] = APP_ID
    os.environ["RAKUTEN_ACCESS_KEY"] = key_for(APP_ID)
    os.environ.pop("RAKUTEN_APP_IDS", None)
    os.environ.pop("REDIS_URL", None)  # the limiter is the process's own, on the simulated clock
    from _setup import django_on_temp_postgres, django_on_temp_sqlite, postgres_available

    if args.db == "postgresql":
        if not postgres_available():
            sys.exit("PostgreSQL is not reachable ($BENCH_PG_URL)")
        django_on_temp_postgres("recheck")
    else:
        django_on_temp_sqlite("recheck")
    return simulate(args)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shops", type=int, default=200)
    parser.add_argument("--watched", type=int, default=10, help="watched listings a shop")
    parser.add_argument("--catalogue", type=int, default=200, help="items a shop sells")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--horizon-minutes", type=float, default=15.0)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--batch-size", type=int, default=None, help="OUTBOX_BATCH_SIZE")
    parser.add_argument("--cycles", action="store_true", help="print the first round's cycles")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="rows due one of each shop in turn, not shop by shop",
    )
    args = parser.parse_args(argv)
    if args.catalogue < args.watched:
        parser.error("--catalogue: at least --watched")
    return args


def simulate(args: argparse.Namespace) -> list[Result]:
    from django.conf import settings
    from django.db import connection
    from django.test import override_settings

    from outbox import dispatch
    from tests.fakes.channel import RecordingChannel
    from tests.fakes.ichiba import key_for
    from watches.marketplaces.ratelimit import forget_limiter

    started = time.monotonic()
    clock = SimClock(T0 - DETECTED_BEFORE)
    built = build(args.shops, args.watched)
    rows = args.shops * args.watched
    print(
        f"world: {rows:,} due rows over {rows:,} listings in {args.shops} shops "
        f"({args.watched} each, catalogues of {args.catalogue}), one id at {RATE:g}/s; "
        f"{connection.vendor}; built in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    fake = fake_ichiba(clock)
    results: list[Result] = []
    try:
        with (
            override_settings(
                RAKUTEN_APP_ID=APP_ID,
                RAKUTEN_APP_IDS=[APP_ID],
                RAKUTEN_ACCESS_KEYS={APP_ID: key_for(APP_ID)},
                RAKUTEN_RATE_PER_SECOND=RATE,
                RAKUTEN_API_URL=fake.url,
                MARKETPLACE_ADAPTERS={
                    **settings.MARKETPLACE_ADAPTERS,
                    "rakuten": "watches.marketplaces.rakuten.RakutenMarketplace",
                },
                OUTBOX_BATCH_SIZE=args.batch_size or settings.OUTBOX_BATCH_SIZE,
                OUTBOX_CHANNEL_CLASSES={
                    **settings.OUTBOX_CHANNEL_CLASSES,
                    "console": "tests.fakes.channel.RecordingChannel",
                },
            ),
            # The cycle's deadline on the simulated clock, as every other time it reads.
            mock.patch.object(dispatch, "time", types.SimpleNamespace(monotonic=clock)),
        ):
            for round_ in range(args.rounds):
                order = PATHS if round_ % 2 == 0 else PATHS[::-1]
                for path in order:
                    reset(built, path, clock, fake, args)
                    RecordingChannel.reset()
                    result = run(path, clock, fake, args.horizon_minutes * 60)
                    results.append(result)
                    print(_line(round_ + 1, result), flush=True)
                    if args.cycles and round_ == 0:
                        print_cycles(result)
            print_table(results, rows, args)
    finally:
        fake.stop()
        clock.stop()
        forget_limiter(f"rakuten:{APP_ID}", RATE)
    print(f"total {time.monotonic() - started:.0f} s; load {os.getloadavg()[0]:.1f}")
    return results


@dataclasses.dataclass
class Built:
    listing_ids: list[int]
    last_point: int


def build(shops: int, watched: int) -> Built:
    """The listings as the detecting poll left them (its point at the sale price, statistics
    computed), a console device and a target-price watch for each."""
    from django.db import connection
    from django.utils import timezone

    from watches.models import Channel, Device, Listing, PricePoint, Trigger, Watch
    from watches.polling.history import refresh_stats

    detected = timezone.now()
    listings = Listing.objects.bulk_create(
        (
            Listing(
                source="rakuten",
                item_code=item_code(shop, n),
                name=f"テスト商品 sale{n:03d}",
                shop_name=f"ショップ {shop_code(shop)}",
                url=f"https://item.rakuten.co.jp/{shop_code(shop)}/sale{n:03d}/",
                price=SALE,
                in_stock=True,
                last_polled_at=detected,
                seen_via="item",
            )
            for shop in range(shops)
            for n in range(watched)
        ),
        batch_size=1000,
    )
    PricePoint.objects.bulk_create(
        (
            PricePoint(listing=listing, observed_at=at, price=price, shipping=None, in_stock=True)
            for listing in listings
            for at, price in ((detected - dt.timedelta(days=1), BEFORE), (detected, SALE))
        ),
        batch_size=2000,
    )
    refresh_stats([listing.pk for listing in listings], detected)
    devices = Device.objects.bulk_create(
        (Device(token_hash=f"recheck-{n}", channel=Channel.CONSOLE) for n in range(len(listings))),
        batch_size=1000,
    )
    Watch.objects.bulk_create(
        (
            Watch(
                device=device,
                listing=listing,
                trigger=Trigger.TARGET_PRICE,
                target_price=TARGET,
            )
            for device, listing in zip(devices, listings, strict=True)
        ),
        batch_size=1000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        last_point = cursor.fetchone()[0]
    return Built([listing.pk for listing in listings], last_point)


def reset(built: Built, path: str, clock: SimClock, fake, args: argparse.Namespace) -> None:
    """Back to the moment of detection: the listings as the poll left them, no feeds learned,
    one due row a watch (detected then); the fake's catalogue as the sale left it, a fresh
    budget; for `items`, feeds contradicted by item requests."""
    from _reset import settle
    from django.db import connection, transaction

    from outbox.enqueue import Detection, enqueue_many
    from watches.marketplaces.ratelimit import RateLimiter, install_limiter
    from watches.models import Channel, FeedCheck, ShopFeed, Trigger, Watch
    from watches.polling import feeds
    from watches.polling.history import refresh_stats

    clock.move_to((T0 - DETECTED_BEFORE).timestamp())
    detected = T0 - DETECTED_BEFORE
    at = connection.ops.adapt_datetimefield_value(detected)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM outbox_outboxevent")
        cursor.execute("DELETE FROM outbox_outbox")
        cursor.execute("DELETE FROM outbox_dispatchrun")
        cursor.execute("DELETE FROM watches_pricepoint WHERE id > %s", [built.last_point])
        cursor.execute(
            "UPDATE watches_listing SET price = %s, shipping = NULL, in_stock = %s, "
            "last_polled_at = %s, last_error = '', last_error_at = NULL, seen_via = 'item'",
            [SALE, True, at],
        )
        cursor.execute(
            "UPDATE watches_watch SET last_notified_price = NULL, last_notified_at = NULL, "
            "last_notified_detected_at = NULL"
        )
        ShopFeed.objects.all().delete()
        FeedCheck.objects.all().delete()
        if path == "items":
            FeedCheck.objects.create(
                source="rakuten", confirmed=0, contradicted=feeds.TRUST_SAMPLES
            )
    watches = list(Watch.objects.order_by("pk").values_list("pk", "device_id"))
    if args.interleaved:
        # Watches were made shop by shop: the n-th of every shop, then the next n.
        order = sorted(range(len(watches)), key=lambda i: (i % args.watched, i))
        watches = [watches[i] for i in order]
    enqueue_many(
        (
            Detection(
                pk, device_id, Channel.CONSOLE, Trigger.TARGET_PRICE, detected, {"price": SALE}
            )
            for pk, device_id in watches
        ),
        now=detected,
    )
    fake.stock(args.shops, args.watched, args.catalogue)
    refresh_stats(built.listing_ids, detected)  # as the detecting poll computed them
    install_limiter(f"rakuten:{APP_ID}", RATE, RateLimiter(RATE, clock=clock, sleep=clock.sleep))
    if not connection.in_atomic_block:  # a test's transaction: nothing to settle
        settle()


def run(path: str, clock: SimClock, fake, horizon: float) -> Result:
    """Dispatcher cycles from T0, one at a time on the minute, until no row is left to send
    or `horizon` seconds have passed."""
    from django.db.models import Count, Min

    from outbox.dispatch import run_cycle
    from outbox.models import Outbox, Status

    started = time.monotonic()
    asked_before, too_many_before = len(fake.requests), fake.too_many
    start = T0.timestamp()
    tick = start - 60
    cycles: list[dict] = []
    open_ = (Status.PENDING, Status.RETRY, Status.SENDING)
    while True:
        left = Outbox.objects.filter(status__in=open_).aggregate(
            n=Count("id"), due=Min("next_attempt_at")
        )
        if not left["n"]:
            break
        due = left["due"].timestamp() if left["due"] else clock.now
        tick = max(tick + 60, _minute_up(clock.now), _minute_up(due))
        if tick - start > horizon:
            break
        clock.move_to(tick)
        asked = len(fake.requests)
        result = run_cycle()
        cycles.append(
            {
                "at": tick - start,
                "seconds": clock.now - tick,
                "claimed": result.claimed,
                "requests": len(fake.requests) - asked,
                **result.as_json(),
            }
        )
    return _result(path, fake, asked_before, too_many_before, cycles, time.monotonic() - started)


def _minute_up(timestamp: float) -> float:
    return math.ceil(timestamp / 60) * 60


def _result(path, fake, asked_before, too_many_before, cycles, wall) -> Result:
    from django.db.models import Count, Max

    from outbox.models import Outbox, OutboxEvent, Reason, Status

    asked = fake.requests[asked_before:]
    pages = Counter(int(q.get("page", 1)) for q in asked if "shopCode" in q)
    final = Counter(dict(Outbox.objects.values_list("status").annotate(n=Count("id")).order_by()))
    ended = OutboxEvent.objects.filter(
        to_status__in=(Status.SENT, Status.DROPPED, Status.FAILED)
    ).aggregate(at=Max("at"))["at"]
    # Drained: every row sent or dropped (a failed row was never told, nor judged moot).
    not_drained = (Status.PENDING, Status.RETRY, Status.SENDING, Status.FAILED)
    drained = None
    if ended is not None and not any(final[status] for status in not_drained):
        drained = (ended - T0).total_seconds()
    retry_events = OutboxEvent.objects.filter(to_status=Status.RETRY)
    retries = Counter(dict(retry_events.values_list("reason").annotate(n=Count("id")).order_by()))
    ages = OutboxEvent.objects.filter(data__has_key="fresh_age_seconds").values_list(
        "to_status", "data"
    )
    fresh_sent = sorted(d["fresh_age_seconds"] for s, d in ages if d and s == Status.SENT)
    fresh_expired = sorted(d["fresh_age_seconds"] for s, d in ages if d and s == Status.RETRY)
    first_held = retry_events.filter(reason=Reason.FRESH_VALUE_EXPIRED).order_by("id").first()
    return Result(
        path=path,
        drained=drained,
        ended=None if ended is None else (ended - T0).total_seconds(),
        requests=len(asked),
        items=sum(1 for q in asked if "itemCode" in q),
        pages=pages,
        final=final,
        retries=retries,
        busiest=_busiest(fake.by_second),
        too_many=fake.too_many - too_many_before,
        fresh_sent=fresh_sent,
        fresh_expired=fresh_expired,
        held_back=first_held.detail if first_held else "",
        cycles=cycles,
        wall=wall,
    )


def _busiest(by_second: Counter[tuple[str, int]]) -> dict[str, int]:
    most: dict[str, int] = {}
    for (app_id, _), count in by_second.items():
        most[app_id] = max(most.get(app_id, 0), count)
    return most


def _outcome(r: Result) -> str:
    if r.drained is not None:
        return f"drained in {r.drained:,.0f} s"
    if _left(r):
        return f"not drained: {_left(r):,} rows left at the horizon"
    return f"not drained: {r.final['failed']:,} rows failed, the last at {r.ended:,.0f} s"


def _line(round_: int, r: Result) -> str:
    return (
        f"  round {round_}, {r.path}: {_outcome(r)}; {r.requests:,} requests "
        f"({r.items:,} items, {sum(r.pages.values()):,} shop pages); sent {r.final['sent']:,}, "
        f"dropped {r.final['dropped']:,}, failed {r.final['failed']:,}, left {_left(r):,}; "
        f"retries {dict(r.retries) or 'none'}; {len(r.cycles)} cycles; wall {r.wall:.0f} s"
    )


def print_cycles(r: Result) -> None:
    print("    | at (s) | took (s) | claimed | requests | sent | retry | dropped | failed |")
    for c in r.cycles:
        print(
            f"    | {c['at']:,.0f} | {c['seconds']:,.0f} | {c['claimed']} | {c['requests']} "
            f"| {c['sent']} | {c['retry']} | {c['dropped']} | {c['failed']} |"
        )


def print_table(results: list[Result], rows: int, args: argparse.Namespace) -> None:
    from django.conf import settings

    rounds = len(results) // len(PATHS)
    print(
        f"\n{rows:,} due rows, one id at {RATE:g} request/s; OUTBOX_BATCH_SIZE "
        f"{settings.OUTBOX_BATCH_SIZE}, OUTBOX_CYCLE_SECONDS {settings.OUTBOX_CYCLE_SECONDS}, "
        f"OUTBOX_REFETCH_MAX_AGE {settings.OUTBOX_REFETCH_MAX_AGE} s; a cycle every simulated "
        f"minute for at most {args.horizon_minutes:g} min; {rounds} round(s), the paths taking "
        "turns going first, medians (the clock is simulated: rounds differ in wall time only)\n"
    )
    print(
        "| path | drained | requests | items | shop pages (1st/2nd/3rd) | sent | dropped "
        "| failed | left | retries | value age at the gate: sent / held back | busiest second "
        "| 429 | wall |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in PATHS:
        mine = [r for r in results if r.path == path]
        median = _median_of(mine)
        pages = "/".join(f"{median(lambda r, p=p: r.pages[p]):,.0f}" for p in (1, 2, 3))
        drained = [r.drained for r in mine]
        retries = ", ".join(
            f"{reason} {median(lambda r, k=reason: r.retries[k]):,.0f}"
            for reason in sorted({k for r in mine for k in r.retries})
        )
        print(
            f"| {path} | {_drained(drained)} | {median(lambda r: r.requests):,.0f} "
            f"| {median(lambda r: r.items):,.0f} | {pages} "
            f"| {median(lambda r: r.final['sent']):,.0f} "
            f"| {median(lambda r: r.final['dropped']):,.0f} "
            f"| {median(lambda r: r.final['failed']):,.0f} "
            f"| {median(lambda r: _left(r)):,.0f} | {retries or 'none'} "
            f"| {_ages(mine[0].fresh_sent)} / {_ages(mine[0].fresh_expired)} "
            f"| {max(max(r.busiest.values(), default=0) for r in mine)} "
            f"| {sum(r.too_many for r in mine)} | {median(lambda r: r.wall):.0f} s |"
        )
    print()
    for path in PATHS:
        first = next(r for r in results if r.path == path)
        if first.cycles:
            c = first.cycles[0]
            print(
                f"{path}: the first cycle claimed {c['claimed']:,} rows and asked "
                f"{c['requests']:,} requests in {c['seconds']:,.0f} simulated s; sent "
                f"{c['sent']:,}, retried {c['retry']:,}"
                + (f"; the first held back: {first.held_back}" if first.held_back else "")
            )
    shops = [r.drained for r in results if r.path == "shop pages"]
    verdict = "met" if all(d is not None and d <= GOAL_SECONDS for d in shops) else "missed"
    print(f"target, shop pages drained within {GOAL_SECONDS // 60} min: {verdict}")


def _median_of(results: list[Result]):
    return lambda value: statistics.median(value(r) for r in results)


def _left(r: Result) -> int:
    return r.final["pending"] + r.final["retry"] + r.final["sending"]


def _drained(values: list[float | None]) -> str:
    if any(v is None for v in values):
        return "not drained" if all(v is None for v in values) else "not in every round"
    return f"{statistics.median([v for v in values if v is not None]):,.0f} s"


def _ages(ages: list[float]) -> str:
    if not ages:
        return "none"
    return f"{statistics.median(ages):.0f} s ({ages[0]:.0f}–{ages[-1]:.0f})"


if __name__ == "__main__":
    main()
