"""A device's watches: create, edit, pause, resume, remove (and undo), what each one waits
for in words, and where each one stands against its line right now.

Removing is a soft delete (`removed_at`): a notification already on its way for the watch is
then dropped `watch_removed` by the dispatcher instead of being sent.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from django.utils.translation import gettext as _

from common import deadlines
from watches import units
from watches.models import Device, Listing, PricePoint, Product, Trigger, Watch, unit_price
from watches.points import Breakdown
from watches.products.offers import on_products_pack
from watches.templatetags.yasugoro import when
from watches.triggers import (
    DEFAULT_DROP_PERCENT,
    LOW_WINDOW,
    History,
    already_told,
    compared_value,
    line_for,
    members_count,
)

_UNIT_TRIGGERS = (Trigger.TARGET_PRICE, Trigger.BACK_IN_STOCK)


@dataclass(frozen=True)
class WatchParams:
    """What a person chose on the watch form, already validated."""

    trigger: str
    target_price: int | None = None
    drop_percent: int | None = None
    use_unit_price: bool = False
    # Judge on the price after points and shipping (the form's default where the
    # marketplace gives points), else on the price incl. shipping.
    after_points: bool = False


def save_watch(
    device: Device, listing: Listing, params: WatchParams, *, product: Product | None = None
) -> tuple[Watch, bool]:
    """Watch `listing` for `device` — or, with `product`, every offer of the product, the
    watch following `listing` among them. A device has at most one live watch per listing
    (or product) and trigger: choosing the same trigger again changes that watch instead of
    adding a second, which would only mean two notifications for one event. Returns (watch,
    created)."""
    with transaction.atomic():
        _hold_device(device.pk)
        existing = (
            _same_watches(device.pk, params.trigger, listing.pk, product.pk if product else None)
            .select_related("listing")
            .order_by("-created_at", "-id")
            .first()
        )
        if existing is not None:
            return update_watch(existing, params), False
        watch = Watch.objects.create(
            device=device,
            listing=listing,
            product=product,
            trigger=params.trigger,
            target_price=params.target_price,
            drop_percent=params.drop_percent,
            use_unit_price=params.use_unit_price and bool((product or listing).units_per_pack),
            after_points=params.after_points,
        )
    return watch, True


def _hold_device(device_id: int) -> None:
    """Serialise the device's watch writes until the transaction ends: "no live watch yet,
    so insert one" is two statements, and two submits of one form (a double click) would
    both find none and make two watches — each event then told twice. On PostgreSQL the
    device's row lock (FOR NO KEY UPDATE: inserts that reference the device still go on);
    SQLite takes the database's write lock as the transaction begins (decision 0004) and
    Django leaves FOR UPDATE out there."""
    list(Device.objects.filter(pk=device_id).select_for_update(no_key=True).values_list("pk"))


def _same_watches(
    device_id: int, trigger: str, listing_id: int, product_id: int | None
) -> QuerySet[Watch]:
    """The device's live watches a watch of (`listing` or `product`, `trigger`) would repeat:
    a product watch's is the product (its listing is whichever offer it follows now), a
    listing watch's is the listing — a product watch following that offer is another."""
    live = Watch.live.filter(device_id=device_id, trigger=trigger)
    if product_id is not None:
        return live.filter(product_id=product_id)
    return live.filter(listing_id=listing_id, product__isnull=True)


def update_watch(watch: Watch, params: WatchParams) -> Watch:
    """Change a watch's trigger or parameter.

    The delivered baseline (`last_notified_*`) is kept when only the number changes: having
    been told ¥980 yesterday, a new target of ¥1,000 must not repeat ¥980 today. It is
    cleared when what is compared changes (another trigger, per unit instead of per pack,
    after points instead of incl. shipping): the old baseline is then a number of a
    different kind."""
    use_unit = params.use_unit_price and bool((watch.product or watch.listing).units_per_pack)
    compares_differently = (
        watch.trigger != params.trigger
        or watch.use_unit_price != use_unit
        or watch.after_points != params.after_points
    )
    watch.trigger = params.trigger
    watch.target_price = params.target_price
    watch.drop_percent = params.drop_percent
    watch.use_unit_price = use_unit
    watch.after_points = params.after_points
    fields = [
        "trigger",
        "target_price",
        "drop_percent",
        "use_unit_price",
        "after_points",
        "updated_at",
    ]
    if compares_differently:
        watch.last_notified_price = None
        watch.last_notified_at = None
        watch.last_notified_detected_at = None
        # Judged from now: a restock told before, or one before a watch for restocks, is
        # not news under the new settings.
        watch.judged_since = timezone.now()
        fields += [
            "last_notified_price",
            "last_notified_at",
            "last_notified_detected_at",
            "judged_since",
        ]
    watch.save(update_fields=fields)
    return watch


def change_watch(watch: Watch, params: WatchParams) -> bool:
    """Change `watch` as the edit form asks (`update_watch`). False, and nothing changed,
    when the device has another live watch of the new trigger on the same listing (or
    product): two would mean two notifications for one event."""
    with transaction.atomic():
        _hold_device(watch.device_id)
        same = _same_watches(watch.device_id, params.trigger, watch.listing_id, watch.product_id)
        if same.exclude(pk=watch.pk).exists():
            return False
        update_watch(watch, params)
    return True


def set_paused(watch: Watch, paused: bool) -> None:
    Watch.objects.filter(pk=watch.pk).update(paused=paused, updated_at=timezone.now())
    watch.paused = paused


def remove_watch(watch: Watch, now: dt.datetime | None = None) -> None:
    """Soft delete: the row stays so that a pending notification can see it was removed."""
    now = now or timezone.now()
    Watch.objects.filter(pk=watch.pk, removed_at__isnull=True).update(
        removed_at=now, updated_at=now
    )
    watch.removed_at = now


def restore_watch(watch: Watch) -> bool:
    """Undo a removal. False when the device has meanwhile made another live watch with the
    same trigger on the listing — or, for a product watch, on the product (two would mean
    two notifications for one event)."""
    with transaction.atomic():
        _hold_device(watch.device_id)
        clash = _same_watches(watch.device_id, watch.trigger, watch.listing_id, watch.product_id)
        if clash.exclude(pk=watch.pk).exists():
            return False
        Watch.objects.filter(pk=watch.pk).update(removed_at=None, updated_at=timezone.now())
    watch.removed_at = None
    return True


# --- Words and numbers for the pages -----------------------------------------------------


def on_hold(watch: Watch) -> bool:
    """Whether nothing is sent for the watch whatever the price: the person paused it, or
    it is `untracked`."""
    return watch.paused or untracked(watch)


def untracked(watch: Watch) -> bool:
    """Staff stopped tracking the listing the watch depends on: polling skips a paused
    listing. A product watch goes on with the product's other offers, as the dispatcher's
    re-check does (`outbox.recheck`)."""
    return watch.product_id is None and watch.listing.paused


def yen_text(value: Decimal | int | None) -> str:
    """¥1,280, or ¥49.17 for a unit price with sen."""
    if value is None:
        return "—"
    number = Decimal(value)
    if number == number.to_integral_value():
        return f"¥{int(number):,}"
    return f"¥{number.quantize(Decimal('0.01')):,}"


def per_unit(amount: str, listing: Listing) -> str:
    return units.per_unit(amount, listing.unit_label)


def describe(watch: Watch) -> str:
    """What the watch waits for, in one short phrase ("At or below ¥1,000"); a product
    watch's says it holds at any shop ("Any shop at or below ¥1,000")."""
    listing = watch.listing
    target = watch.target_price
    target_text = yen_text(target) if target is not None else ""
    if target is not None and watch.use_unit_price and listing.units_per_pack:
        target_text = per_unit(target_text, listing)
    product = watch.product_id is not None
    if watch.trigger == Trigger.TARGET_PRICE:
        if product:
            return _("Any shop at or below %(target)s") % {"target": target_text}
        return _("At or below %(target)s") % {"target": target_text}
    if watch.trigger == Trigger.PRICE_DROP:
        percent = {"percent": watch.drop_percent or DEFAULT_DROP_PERCENT}
        if product:
            return _("The cheapest shop %(percent)s%% or more below its typical price") % percent
        return _("%(percent)s%% or more below its typical price") % percent
    if watch.trigger == Trigger.LOWEST:
        return _("At its lowest price in 90 days")
    if target is not None:
        if product:
            return _("Back in stock at any shop, at or below %(target)s") % {"target": target_text}
        return _("Back in stock at or below %(target)s") % {"target": target_text}
    return _("Back in stock at any shop") if product else _("Back in stock")


@dataclass(frozen=True)
class Standing:
    """Where a watch stands against its line now, for My watches."""

    # "met" (at or below the line now), "waiting" (above it), "no_line" (not enough history
    # to draw one), "out_of_stock", "in_stock" (back in stock: waits for a sell-out first),
    # "unknown" (no price yet)
    state: str
    value: Decimal | None  # the compared value now (effective or unit price; after points)
    line: Decimal | None  # at or below this it fires
    per_unit: bool
    told: bool = False  # a notification was already delivered at this value or lower
    # The price's breakdown (HTML) for a watch after points with points ("" else).
    breakdown: str = ""

    @property
    def gap(self) -> Decimal | None:
        if self.value is None or self.line is None:
            return None
        return self.value - self.line


def standing(watch: Watch, first_seen: dt.datetime | None, now: dt.datetime) -> Standing:
    """The watch against its line, from the listing's stored stats (typical price, 90-day
    low — after points for a watch after points) rather than its history: My watches shows
    many at once. The dispatcher judges the exact line from the full history when it
    matters."""
    listing = watch.listing
    uses_unit = (
        watch.use_unit_price and bool(listing.units_per_pack) and watch.trigger in _UNIT_TRIGGERS
    )
    start = max(first_seen, now - LOW_WINDOW) if first_seen else now
    typical, low = (
        (listing.typical_net, listing.low_90_net)
        if watch.after_points
        else (listing.typical_price, listing.low_90)
    )
    history = History(
        typical=Decimal(typical) if typical else None,
        low_90=low,
        span=now - start,
        previous_in_stock=None,
    )
    line = line_for(watch, history)
    breakdown = _breakdown_now(watch, listing, now)
    value = compared_value(
        watch.trigger,
        watch.use_unit_price,
        listing.units_per_pack,
        listing.price,
        listing.shipping,
        breakdown.counted if watch.after_points else 0,
    )
    if listing.in_stock is False:
        state = "out_of_stock"
    elif value is None:
        state = "unknown"
    elif watch.trigger == Trigger.BACK_IN_STOCK:
        state = "in_stock"
    elif line is None:
        state = "no_line"
    else:
        state = "met" if value <= line else "waiting"
    if line is not None and watch.trigger == Trigger.PRICE_DROP:
        line = line.quantize(Decimal("1"))
    words = breakdown.html() if watch.after_points and breakdown.points else ""
    return Standing(state, value, line, uses_unit, already_told(watch, value), words)


def _breakdown_now(watch: Watch, listing: Listing, now: dt.datetime) -> Breakdown:
    """The listing's price as last seen, with the points everyone gets at `now` (its
    campaign may have ended since), the member-only points counted where they count for
    the watch's device."""
    on = listing.points_until is not None and now < listing.points_until
    if listing.points_until is not None:
        deadlines.note(listing.points_until)
    return Breakdown(
        price=listing.price,
        shipping=listing.shipping,
        points=listing.points_at(now),
        rate=listing.point_rate if on else None,
        until=listing.points_until if on else None,
        member_points=listing.member_points,
        members=members_count(watch, watch.device.lyp_premium),
    )


@dataclass(frozen=True)
class WatchRow:
    watch: Watch
    summary: str
    standing: Standing
    advice: str
    # The end of the device's quiet hours when it is inside them now ("08:00"), else "".
    held_until: str = ""

    @property
    def untracked(self) -> bool:
        return untracked(self.watch)

    @property
    def compares(self) -> str:
        """What the watch compares, in words."""
        if self.watch.after_points:
            return _("after points and shipping")
        return _("price incl. shipping")


def live_watches(device: Device | None) -> QuerySet[Watch]:
    """The device's live watches with their listing and the time of its first price point
    (for "enough history yet?"), newest first, in one query."""
    if device is None:
        return Watch.objects.none()
    first_seen = (
        PricePoint.objects.filter(listing=OuterRef("listing_id"))
        .order_by("observed_at")
        .values("observed_at")[:1]
    )
    return (
        Watch.live.filter(device=device)
        .select_related("listing", "product")
        .annotate(first_seen=Subquery(first_seen))
        .order_by("-created_at", "-id")
    )


def can_notify(device: Device | None) -> bool:
    """Whether anything reaches the device right now (push, e-mail or both)."""
    return bool(device and device.receiving_channels)


def held_until(device: Device | None, now: dt.datetime) -> str:
    """ "08:00" while the device is inside its quiet hours (the window's end, in its zone),
    else "": what detection finds meanwhile waits until then (outbox.holds)."""
    if device is None:
        return ""
    until = device.quiet_until(now)
    return timezone.localtime(until, device.zone).strftime("%H:%M") if until else ""


def rows_for(
    watches: list[Watch], device: Device | None, now: dt.datetime | None = None
) -> list[WatchRow]:
    """The watches of `device` as the pages show them: what is promised depends on whether
    anything reaches it now, and on its quiet hours."""
    now = now or timezone.now()
    reaches = can_notify(device)
    held = held_until(device, now) if reaches else ""
    for watch in watches:
        if device is not None and watch.device_id == device.pk:
            watch.device = device  # at hand: no query per watch
    judged_per_products_pack(watches)
    return [
        WatchRow(
            watch=watch,
            summary=describe(watch),
            standing=standing(watch, getattr(watch, "first_seen", None), now),
            advice=advice(watch.listing, watch, can_notify=reaches, held=held),
            held_until=held,
        )
        for watch in watches
    ]


def judged_per_products_pack(watches: list[Watch]) -> None:
    """Give each product watch its offer as the watch judges and tells it: per unit on the
    product's pack (`on_products_pack`, decision 0084), not on the pack the offer's own page
    names. The products not loaded with the watches are read in one query."""
    loaded = {
        watch.product_id: watch.product
        for watch in watches
        if watch.product_id is not None and Watch.product.is_cached(watch)
    }
    missing = {w.product_id for w in watches if w.product_id is not None} - set(loaded)
    products = {**loaded, **Product.objects.in_bulk(missing)} if missing else loaded
    for watch in watches:
        if watch.product_id is not None and watch.product_id in products:
            product = products[watch.product_id]
            assert product is not None  # a product watch's product
            watch.listing = on_products_pack(watch.listing, product)


def advice(listing: Listing, watch: Watch, *, can_notify: bool = True, held: str = "") -> str:
    """A word of warning about a target, or "": below the 90-day low (it may never come),
    or already met — then what really happens next: a notification after the next check,
    held until the end of quiet hours (`held`, "08:00"), nothing while nothing reaches the
    device, or nothing new when it was already told at this price. Nothing is promised for
    a watch `on_hold`: the page says it is paused (or no longer tracked) instead."""
    if watch.trigger not in _UNIT_TRIGGERS or watch.target_price is None:
        return ""
    use_unit = watch.use_unit_price and bool(listing.units_per_pack)
    target = Decimal(watch.target_price)
    low = listing.low_90_net if watch.after_points else listing.low_90
    low_value = unit_price(low, listing.units_per_pack) if use_unit else low
    now_value = compared_value(
        watch.trigger,
        use_unit,
        listing.units_per_pack,
        listing.price,
        listing.shipping,
        _breakdown_now(watch, listing, timezone.now()).counted if watch.after_points else 0,
    )

    def shown(value: Decimal | int | None) -> str:
        return per_unit(yen_text(value), listing) if use_unit else yen_text(value)

    if low_value is not None and target < Decimal(low_value):
        return _(
            "Your price %(target)s is below the lowest price of the last 90 days "
            "(%(low)s). It may take a long time, or never happen."
        ) % {"target": shown(target), "low": shown(low_value)}
    if (
        watch.trigger == Trigger.TARGET_PRICE
        and not on_hold(watch)
        and now_value is not None
        and listing.in_stock
        and now_value <= target
    ):
        if not can_notify:
            return _(
                "It is already %(now)s, at or below your price, but nothing can reach you yet: "
                "turn push notifications on, or add an e-mail address in Settings."
            ) % {"now": shown(now_value)}
        if already_told(watch, now_value):
            return _(
                "It is already %(now)s, at or below your price. We told you %(told)s on "
                "%(at)s; we tell you again if it drops further."
            ) % {
                "now": shown(now_value),
                "told": shown(watch.last_notified_price),
                "at": when(watch.last_notified_at),
            }
        if held:
            return _(
                "It is already %(now)s, at or below your price. Your quiet hours hold "
                "notifications until %(time)s: we check the price again then, and tell you "
                "if it still holds."
            ) % {"now": shown(now_value), "time": held}
        return _(
            "It is already %(now)s, at or below your price: expect a notification after the "
            "next price check."
        ) % {"now": shown(now_value)}
    return ""


def saved_message(
    watch: Watch, device: Device, *, created: bool, now: dt.datetime | None = None
) -> str:
    """What a person is told when a watch is saved (made, or changed): that it is saved —
    and paused still, for a paused watch, or on a listing staff stopped tracking, either of
    which sends nothing —, and when its condition
    already holds, what happens next — read from what detection and the
    dispatcher will do (the next poll detects it, the dispatcher re-checks and sends it once
    that day; quiet hours hold it; nothing reaches a device without a channel)."""
    now = now or timezone.now()
    product = watch.product_id is not None
    judged_per_products_pack([watch])
    if created:
        saved = (
            _("Watching every shop. We check the price again before we tell you.")
            if product
            else _("Watching. We check the price again before we tell you.")
        )
    else:
        saved = (
            _("Your watch on this product is updated.")
            if product
            else _("Your watch on this item is updated.")
        )
    if watch.paused:
        # Saving the form changes a paused watch and leaves it paused.
        paused = _("It is paused: nothing is sent for it until you resume it in My watches.")
        return f"{saved} {paused}"
    if untracked(watch):
        return f"{saved} {_('We no longer track this item: nothing is sent for it.')}"
    state = standing(watch, getattr(watch, "first_seen", None), now)
    if state.state != "met":
        return saved
    listing = watch.listing

    def shown(value: Decimal | None) -> str:
        return per_unit(yen_text(value), listing) if state.per_unit else yen_text(value)

    values: dict[str, object] = {"now": shown(state.value), "line": shown(state.line)}
    if not can_notify(device):
        holds = _(
            "The price is already %(now)s, at or below %(line)s, but nothing can reach you "
            "yet: turn push notifications on, or add an e-mail address in Settings."
        )
    elif state.told:
        holds = _(
            "The price is already %(now)s, at or below %(line)s. We told you %(told)s on "
            "%(at)s: we tell you again if it goes lower."
        )
        values |= {"told": shown(watch.last_notified_price), "at": when(watch.last_notified_at)}
    elif held := held_until(device, now):
        holds = _(
            "The price is already %(now)s, at or below %(line)s. Your quiet hours hold "
            "notifications until %(time)s: we check the price again then, and tell you if it "
            "still holds."
        )
        values["time"] = held
    else:
        holds = _(
            "The price is already %(now)s, at or below %(line)s: we tell you after its next "
            "price check, usually within %(minutes)s minutes. After that, at most once a day, "
            "when it goes lower."
        )
        values["minutes"] = settings.POLL_MINUTES
    return f"{saved} {holds % values}"


def chart_target(listing: Listing, watches: list[Watch]) -> Decimal | None:
    """The device's target on this listing as a pack price, for the chart's target line:
    the lowest of its target watches (per-unit targets times the units per pack)."""
    values = []
    for watch in watches:
        if watch.trigger not in _UNIT_TRIGGERS or watch.target_price is None:
            continue
        if watch.use_unit_price and listing.units_per_pack:
            values.append(Decimal(watch.target_price) * listing.units_per_pack)
        else:
            values.append(Decimal(watch.target_price))
    return min(values) if values else None
