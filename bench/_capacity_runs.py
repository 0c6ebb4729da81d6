"""One scenario of bench_capacity.py: polling runs every POLL_EVERY_MINUTES of simulated time, in
the plan's order or oldest-first, through the real adapter, limiter and observation rule;
what they detected, and how much of the watched world they kept fresh."""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass

from _capacity_world import World, reset_world

T0 = dt.datetime(2026, 12, 1, 0, 0, tzinfo=dt.UTC)  # 09:00 in Tokyo
APP_IDS = [f"capacity-app-{n}" for n in range(1, 9)]
RATE = 1.0  # requests/s per application id: Rakuten Ichiba's allowance


@dataclass
class Row:
    ids: int
    order: str
    requests: int
    allowance: int
    within_15m: float
    within_1h: float
    never_checked: int
    watched: int
    crossed: int
    detected: int
    p50: float | None  # seconds; None: the percentile falls on a crossing never detected
    p95: float | None
    too_many: int  # requests the fake Ichiba answered 429 (over 1/s for an id)
    busiest_second: int  # most requests one id made in one simulated second
    wall: float
    # The n-th watch of the world → seconds after T0 its row was enqueued (by place, not
    # by id: two worlds written into one PostgreSQL database get other ids).
    detections: dict[int, float]


class Fixed:
    """What does not change while the bench runs, read once: the live watches grouped as the
    plan reads them, and each listing's watches by target, highest first (a price at or
    below a target fires that watch and every one before it)."""

    def __init__(self) -> None:
        from watches.models import Listing, Watch
        from watches.polling.plan import watch_groups

        self.groups = watch_groups(Listing.objects.all())
        self.targets: dict[int, list[tuple[int, int]]] = defaultdict(list)
        rows = Watch.objects.values_list("listing_id", "target_price", "id").iterator(10_000)
        for listing_id, target, watch_id in rows:
            assert target is not None  # every watch of this world has a target price
            self.targets[listing_id].append((target, watch_id))
        for targets in self.targets.values():
            targets.sort(reverse=True)


def run_scenario(
    world: World,
    crossed: dict[int, float | None],
    ids: int,
    order: str,
    judge: str,
    clock,
    fake,
    fixed: Fixed,
) -> Row:
    from django.conf import settings
    from django.utils import timezone

    from watches.marketplaces.ratelimit import RateLimiter, install_limiter
    from watches.polling.plan import watched_coverage

    started = time.monotonic()
    reset_world(T0)
    clock.move_to(T0.timestamp())
    settings.RAKUTEN_APP_IDS = APP_IDS[:ids]
    for app_id in APP_IDS[:ids]:
        install_limiter(
            f"rakuten:{app_id}", RATE, RateLimiter(RATE, clock=clock, sleep=clock.sleep)
        )
    asked_before, too_many_before = len(fake.requests), fake.too_many
    fake.by_second.clear()
    judging = _Judging(fixed.targets) if judge == "sim" else None
    interval = settings.POLL_EVERY_MINUTES * 60
    samples: list[dict] = []
    for run in range(int(world.horizon // interval)):
        start = T0.timestamp() + run * interval
        clock.move_to(max(clock.now, start))
        if run * interval >= 3600 and run * interval % 1800 == 0:
            samples.append(watched_coverage(timezone.now()))
        _one_run(order, judging, fixed, timezone.now())
    clock.move_to(max(clock.now, T0.timestamp() + world.horizon))
    detected = judging.detected if judging else _enqueued()
    return _row(
        world,
        crossed,
        ids,
        order,
        detected,
        samples,
        fake,
        asked_before,
        too_many_before,
        time.monotonic() - started,
    )


def _one_run(order: str, judging: _Judging | None, fixed: Fixed, now: dt.datetime) -> None:
    """One scheduled polling run: the real entry point (`polling.poll`, the plan's order)
    or the order before the plan, with the same requests."""
    from django.conf import settings

    from watches.polling.plan import plan, run_budget
    from watches.polling.poll import due_listings, poll, poll_batch

    if order == "plan" and judging is None:
        poll(max_seconds=settings.POLL_MAX_SECONDS)
        return
    if order == "plan":
        chosen = plan(due_listings(now), now, groups=fixed.groups)
        ids = [item.listing_id for item in chosen if item.listing_id is not None]
    else:
        ids = list(due_listings(now).values_list("id", flat=True)[: run_budget("rakuten")])
    size = settings.POLL_BATCH_SIZE
    for start in range(0, len(ids), size):
        batch = ids[start : start + size]
        if judging is None:
            poll_batch("rakuten", batch)
        else:
            judging.observe(batch)


class _Judging:
    """Polling without its judging: fetch and observe as poll_batch does, then the first
    observation at or below each watch's target is its detection."""

    def __init__(self, targets: dict[int, list[tuple[int, int]]]) -> None:
        self.detected: dict[int, float] = {}
        self.watches = targets
        self.fired: dict[int, int] = defaultdict(int)

    def observe(self, ids: list[int]) -> None:
        from django.utils import timezone

        from watches.models import Listing
        from watches.polling.observations import fetch, observe

        position = {listing_id: i for i, listing_id in enumerate(ids)}
        listings = sorted(Listing.objects.filter(id__in=ids), key=lambda row: position[row.pk])
        fetched = fetch("rakuten", [listing.item_code for listing in listings])
        now = timezone.now()
        observations = observe([(item, fetched[item.item_code]) for item in listings], now)
        observations.save()
        enqueued_at = now.timestamp() - T0.timestamp()
        for seen in observations.seen:
            seen_now = seen.observation
            if seen_now is None or not seen_now.in_stock or seen_now.effective_price is None:
                continue
            targets = self.watches.get(seen.listing.pk, [])
            k = self.fired[seen.listing.pk]
            while k < len(targets) and targets[k][0] >= seen_now.effective_price:
                self.detected[targets[k][1]] = enqueued_at
                k += 1
            self.fired[seen.listing.pk] = k


def _enqueued() -> dict[int, float]:
    from django.db.models import Min

    from outbox.models import Outbox

    rows = Outbox.objects.values("watch_id").annotate(at=Min("created_at")).order_by()
    return {row["watch_id"]: (row["at"] - T0).total_seconds() for row in rows}


def _row(
    world, crossed, ids, order, detected, samples, fake, asked_before, too_many_before, wall
) -> Row:

    from watches.models import Listing, Watch

    delays = sorted(
        (detected[watch] - at) if watch in detected else float("inf")
        for watch, at in crossed.items()
        if at is not None
    )
    never = Listing.objects.filter(
        last_polled_at__lt=T0, id__in=Watch.live.values("listing_id")
    ).count()
    allowance = round(ids * RATE * world.horizon)

    def percentile(share: float) -> float | None:
        if not delays:
            return None
        value = delays[min(len(delays) - 1, math.floor(share * len(delays)))]
        return None if value == float("inf") else value

    mean = statistics.fmean
    place = {watch: n for n, watch in enumerate(crossed)}  # crossed is in world order
    return Row(
        ids=ids,
        order=order,
        requests=len(fake.requests) - asked_before,
        allowance=allowance,
        within_15m=mean(s["within_15m"] for s in samples) if samples else 0.0,
        within_1h=mean(s["within_1h"] for s in samples) if samples else 0.0,
        never_checked=never,
        watched=world.watched(),
        crossed=len(delays),
        detected=sum(1 for delay in delays if delay != float("inf")),
        p50=percentile(0.50),
        p95=percentile(0.95),
        too_many=fake.too_many - too_many_before,
        busiest_second=max(fake.by_second.values(), default=0),
        wall=wall,
        detections={place[watch]: at for watch, at in detected.items()},
    )
