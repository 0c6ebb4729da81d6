"""The one door through which another app changes what `watches` owns.

`watches` owns its tables — listings, price history, devices, watches — and is the only app
that writes them. The outbox reads the models freely (`watches.models`), but every change it
needs is one of these functions (pyproject.toml's import-linter contracts, and a test that
records every write of a dispatch cycle at the SQL level, keep it so):

- `refetch`: ask the marketplaces about listings right now — listings that share a shop
  together, from its feed, where the marketplace can — and keep what they said, by the same
  rule as price polling (history point or not, last-seen state, typical price and 90-day
  low, errors) — or, within a freshness bound the caller gives, take a poll's observation
  instead of asking again, or wait for the request another dispatcher is making
  (`watches.polling.inflight`) and take its (`refetch_or_reuse` also says which answers
  those were);
- `refetch_products`: the same for product watches — every shop's offer of each product, one
  request per product and marketplace, kept by the same rule (`watches.products.refetch`);
  its `ProductAnswer` names the best offer in stock now;
- `advance_baselines`: a notification was delivered, so the watch's `last_notified_*` move;
- `deactivate_gone_subscriptions`: the push service said a subscription is gone;
- `record_bounces`: the mail server refused addresses (5xx); at EMAIL_BOUNCE_LIMIT an address
  is disabled; `unsubscribe_token`: the signed one-click unsubscribe token a mail carries;
- `pause_listings`: staff stopped tracking listings; `listings_paused`, the signal staff's
  pausing sends (`watches.pausing`), on which the outbox drops the listings' queued rows;
- `endpoint_allowed`: whether a push endpoint is on the allowlist, and `missed_for`: what a
  device would have been told while its notifications were off (both read-only, for the
  outbox's channel and pages);
- `budget_status` and `watched_coverage`: the marketplaces' budgets per application id and
  the share of watched listings checked lately (read-only, for the admin overview);
  `recheck_capacity`: how many rows a dispatcher's batch can have re-checked within a
  freshness bound, by the slowest marketplace's budget, and `recheck_units`: which rows one
  re-check answers together (both read-only).
- `marketplace_halts`: the marketplaces halted for a configuration fault, each with what to
  fix (read-only, for the admin overview's banner).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from common.bulk import update_by_id
from watches.email_address import record_bounces, unsubscribe_token
from watches.marketplaces import halts
from watches.marketplaces.base import FetchResult, Shape
from watches.missed import missed_for
from watches.models import Device, Listing, MarketplaceHalt, Watch
from watches.pages import pagecache
from watches.polling import feeds, inflight
from watches.polling.feeds import recheck_units
from watches.polling.observations import fetch, fresh_observations, observe, observed_since
from watches.polling.plan import budget_status, recheck_capacity, watched_coverage
from watches.products.refetch import ProductAnswer, offers_together, refetch_products
from watches.subscriptions import endpoint_allowed

__all__ = [
    "ProductAnswer",
    "advance_baselines",
    "budget_status",
    "deactivate_gone_subscriptions",
    "endpoint_allowed",
    "listings_paused",
    "marketplace_halts",
    "missed_for",
    "pause_listings",
    "recheck_capacity",
    "recheck_units",
    "record_bounces",
    "refetch",
    "refetch_or_reuse",
    "refetch_products",
    "unsubscribe_token",
    "watched_coverage",
]

# Sent by `watches.pausing.pause_listings` after staff paused listings, with `listing_ids`,
# `actor` and `now`. A receiver returns what it did, as something that prints as a sentence
# for staff (or None). The outbox connects its receiver when it starts.
listings_paused = Signal()


def refetch(
    listings: Iterable[Listing],
    now: dt.datetime,
    *,
    fresh_within: dt.timedelta | None = None,
    as_loaded: bool = False,
) -> dict[int, FetchResult]:
    """Ask each listing's marketplace about it now (one adapter call per source; no
    transaction open), keep every answer by the observation rule (`watches.polling.observations`,
    saved in one short transaction), and return the answers by listing id. The listings are
    updated in memory too. Never raises for an adapter's failure: that is an answer.

    With `fresh_within`, a listing whose last poll (or re-fetch) observed it successfully
    within that long of `now` is not asked again: its answer is that observation, as
    stored, and nothing is written for it — the marketplace's budget is spent once. The
    listings' state is read again for that unless `as_loaded` says the caller read them a
    moment ago. `refetch_or_reuse` also says which answers were such observations."""
    return refetch_or_reuse(listings, now, fresh_within=fresh_within, as_loaded=as_loaded)[0]


def refetch_or_reuse(
    listings: Iterable[Listing],
    now: dt.datetime,
    *,
    fresh_within: dt.timedelta | None = None,
    as_loaded: bool = False,
) -> tuple[dict[int, FetchResult], set[int]]:
    """`refetch`, and the ids of the listings whose answer was a stored observation (nothing
    asked): the dispatcher asks again at once for one of those that grows too old before its
    delivery comes up, where a value it had just asked for waits its backoff.

    With `fresh_within`, a request another process is making (a dispatcher beside this one:
    `watches.polling.inflight`) is not made again: its listings are asked last, once this
    call's own requests are answered and that process's are, or `fresh_within` has passed —
    what it observed by then is reused, the rest asked."""
    started = time.monotonic()
    listings = list(listings)
    results: dict[int, FetchResult] = {}
    if fresh_within is None:
        return _ask(listings), set()
    results.update(fresh_observations(listings, now - fresh_within, as_loaded=as_loaded, now=now))
    listings = [listing for listing in listings if listing.id not in results]
    reused = set(results)
    if not listings:
        return results, reused
    units = feeds.listing_units(listings)
    since = now - fresh_within

    def take_fresh(some: list[Listing]) -> list[Listing]:
        # Another process may have answered, and taken its marks away, since the read
        # above (or the caller's): what it stored is read now (their ids first: as a rule
        # there are none).
        # A campaign is judged ended by the moment of this read, not the call's start: the
        # read may come after a wait on another process's mark.
        found = fresh_observations(observed_since(some, since), since, now=timezone.now())
        results.update(found)
        reused.update(found)
        return [listing for listing in some if listing.id not in found]

    inflight.ask_once(
        listings,
        lambda listing: units[listing.id],
        take_fresh,
        lambda some: results.update(_ask(some)),
        fresh_within.total_seconds(),
        started,
    )
    return results, reused


def _ask(listings: list[Listing]) -> dict[int, FetchResult]:
    """Ask each listing's marketplace about it now, each answer kept by the observation
    rule (stamped when answered: the budget or another process's mark may have held the
    asks well after the re-check began); the answers by listing id."""
    by_source: dict[str, list[Listing]] = defaultdict(list)
    for listing in listings:
        by_source[listing.source].append(listing)
    answers: list[tuple[Listing, FetchResult]] = []
    on_pages: list[tuple[Listing, FetchResult]] = []
    on_offers: list[tuple[Listing, FetchResult]] = []
    for source, group in by_source.items():
        # Offers of one product are answered together from its page of offers, listings
        # that share a shop from its feed, where the marketplace can (watches.products.refetch,
        # watches.polling.feeds); the rest, and one alone, item by item.
        offered = offers_together(source, group) if len(group) > 1 else {}
        on_offers.extend(
            (listing, offered[listing.id]) for listing in group if listing.id in offered
        )
        group = [listing for listing in group if listing.id not in offered]
        together = feeds.answer_together(source, group) if len(group) > 1 else {}
        on_pages.extend(
            (listing, together[listing.id]) for listing in group if listing.id in together
        )
        alone = [listing for listing in group if listing.id not in together]
        fetched = fetch(source, [listing.item_code for listing in alone])
        answers.extend((listing, fetched[listing.item_code]) for listing in alone)
    results: dict[int, FetchResult] = {}
    now = timezone.now()
    # The dispatcher judges no trigger on the history: the rule's cheaper read will do.
    for batch, via in (
        (on_offers, Shape.PRODUCT),
        (on_pages, Shape.SHOP),
        (answers, Shape.ITEM),
    ):
        if batch:
            observations = observe(batch, now, judging=False, via=via)
            observations.save()
            results.update((seen.listing.id, seen.result) for seen in observations.seen)
    return results


def advance_baselines(
    delivered: Mapping[int, tuple[Decimal | None, dt.datetime]], now: dt.datetime
) -> int:
    """Only a delivered notification moves a watch's baseline (watch id -> the value it told
    and when the detection it told was made): `last_notified_price` becomes that value,
    `last_notified_at` `now`, `last_notified_detected_at` the detection's time — unless a
    later detection's delivery was recorded first (another channel, another dispatcher), which
    stays. One UPDATE per watch through executemany: Django's bulk_update builds a CASE per
    row and costs more than the rows. Returns how many watches were given."""
    fields = ("last_notified_price", "last_notified_at", "last_notified_detected_at")
    return update_by_id(
        Watch,
        fields,
        ((pk, (value, now, detected_at)) for pk, (value, detected_at) in delivered.items()),
        unless_later="last_notified_detected_at",
    )


def deactivate_gone_subscriptions(gone: Iterable[tuple[int, str]]) -> int:
    """The push service called these subscriptions gone: (device id, the endpoint it was
    sent to). Each is deactivated only while it is still that device's endpoint, so a browser
    that subscribed anew meanwhile keeps its new subscription. Returns how many devices were
    deactivated."""
    match = Q()
    for device_id, endpoint in set(gone):
        match |= Q(pk=device_id, push_endpoint=endpoint, push_active=True)
    if not match:
        return 0
    return Device.objects.filter(match).update(push_active=False)


def pause_listings(listing_ids: Iterable[int]) -> int:
    """Stop tracking these listings (polling skips them, the dispatcher drops their rows).
    Returns how many were newly paused."""
    ids = list(listing_ids)
    paused = Listing.objects.filter(id__in=ids, paused=False).update(paused=True)
    if paused:
        # The pages show a paused listing differently: cached ones are stale once committed.
        transaction.on_commit(lambda: pagecache.listings_changed(ids))
    return paused


def resume_listings(listing_ids: Iterable[int]) -> int:
    """Track these paused listings again. Nothing was kept of them while paused — a shop's
    feed may have shown a change of theirs, since pushed off its pages — so each counts as
    never observed (`last_polled_at` cleared): the next poll asks for it first, by a request
    of its own. Returns how many were resumed."""
    ids = list(listing_ids)
    resumed = Listing.objects.filter(id__in=ids, paused=True).update(
        paused=False, last_polled_at=None
    )
    if resumed:
        transaction.on_commit(lambda: pagecache.listings_changed(ids))
    return resumed


def marketplace_halts() -> list[tuple[MarketplaceHalt, list[str]]]:
    """Every marketplace halted for a configuration fault (`watches.marketplaces.halts`), by
    name, with the settings its detail names — none when the fix is the registration on the
    marketplace's developer site."""
    return [(halt, halts.settings_named(halt.detail)) for halt in halts.current()]
