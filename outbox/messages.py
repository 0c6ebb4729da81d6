"""What a notification says, built from the value re-fetched right before sending: for a
watch after points, the price after points and its breakdown ("¥1,980 − 90 pt (5×, until
3/19 13:59) = ¥1,890, free shipping", `watches.points`)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from django.utils import translation
from django.utils.translation import gettext as _

from common.text import clip
from outbox.channels.base import Message
from outbox.models import DEDUP_ZONE, Outbox
from watches.marketplaces.base import Observation
from watches.models import Listing, Trigger, Watch
from watches.points import Breakdown
from watches.triggers import Judgement, members_count
from watches.units import unit_name

_TITLE_LIMIT = 60


def yen(amount: int | float | None) -> str:
    if amount is None:
        return "—"
    return f"¥{round(amount):,}"


def dedup_key(row: Outbox) -> str:
    """The row's identity as the device sees it: watch, trigger, service day, channel — the
    same tuple the unique index folds on, so a duplicate delivery replaces the first."""
    return f"w{row.watch_id}-{row.trigger}-{local_day(row.detected_at):%Y%m%d}"


def topic(row: Outbox) -> str:
    """≤ 32 URL-safe characters from watch and trigger, so the push service replaces an
    undelivered older message for the same watch instead of queueing both."""
    return f"w{row.watch_id}-{row.trigger}"[:32]


def build_message(
    row: Outbox,
    watch: Watch,
    listing: Listing,
    fresh: Observation,
    judgement: Judgement,
    language: str = "ja",
) -> Message:
    """The message of `row` in `language`, from the `fresh` value its `judgement` held on."""
    if translation.get_language() == language:
        # The caller activated it for a whole batch (`outbox.recheck.decide`).
        return _compose(row, watch, listing, fresh, judgement)
    with translation.override(language):
        return _compose(row, watch, listing, fresh, judgement)


def _compose(
    row: Outbox, watch: Watch, listing: Listing, fresh: Observation, judgement: Judgement
) -> Message:
    # The price the watch compares: after the points it counted, or incl. shipping.
    breakdown = Breakdown.of(fresh, members=members_count(watch, row.device.lyp_premium))
    price = breakdown.net if watch.after_points else fresh.effective_price
    # The compared value is a unit price only when the watch asked for it and the pack size
    # is known (watches.triggers.compared_value).
    per_unit_value = (
        judgement.value
        if watch.use_unit_price and listing.units_per_pack and judgement.value is not None
        else None
    )
    name = listing.name or fresh.name or listing.item_code
    if watch.product_id:
        # A product watch is about the product, whichever shop has the best offer.
        name = row.detected_payload.get("listing") or name
    title = clip(name, _TITLE_LIMIT)
    if watch.trigger == Trigger.BACK_IN_STOCK:
        body = _("Back in stock at %(price)s.") % {"price": yen(price)}
    elif watch.trigger == Trigger.TARGET_PRICE and per_unit_value is not None:
        # The target is per unit: say the unit price first, so the two numbers compare.
        body = _("Now %(unit)s per %(label)s (%(price)s a pack) — at or below your %(target)s.") % {
            "unit": f"¥{per_unit_value:,.2f}",
            "label": unit_name(listing.unit_label),
            "price": yen(price),
            "target": yen(watch.target_price),
        }
    elif watch.trigger == Trigger.TARGET_PRICE:
        body = _("Now %(price)s — at or below your %(target)s.") % {
            "price": yen(price),
            "target": yen(watch.target_price),
        }
    elif watch.trigger == Trigger.PRICE_DROP:
        typical = row.detected_payload.get("typical")
        body = _("Now %(price)s — well below its usual %(typical)s.") % {
            "price": yen(price),
            "typical": yen(float(typical)) if typical else "—",
        }
    else:
        body = _("Now %(price)s — the lowest in 90 days.") % {"price": yen(price)}
    if per_unit_value is not None and watch.trigger != Trigger.TARGET_PRICE:
        body += " " + _("(%(unit)s per %(label)s)") % {
            "unit": f"¥{per_unit_value:,.2f}",
            "label": unit_name(listing.unit_label),
        }
    data: dict = {}
    if watch.product_id:
        shop = listing.shop_name or fresh.shop_name or listing.item_code
        # The best offer now may be another shop than the one detected: say which.
        if watch.after_points:
            body += " " + _("At %(shop)s: %(breakdown)s.") % {
                "shop": shop,
                "breakdown": breakdown.text(),
            }
        else:
            body += " " + _("At %(shop)s: %(price)s, %(shipping)s.") % {
                "shop": shop,
                "price": yen(fresh.price),
                "shipping": shipping_text(fresh.shipping),
            }
        data = {"shop": shop, "shop_url": fresh.url or listing.url}
    elif watch.after_points:
        body += " " + _("%(breakdown)s.") % {"breakdown": breakdown.text()}
    # The price compared leaves out a fee the shop did not name: never let it pass for free
    # (`watches.models.net_price`).
    unknown = _("(%(shipping)s)") % {"shipping": shipping_text(None)}
    if not watch.product_id and not watch.after_points and fresh.shipping is None:
        body += " " + unknown
    return Message(
        title=title,
        body=body,
        url=f"/listings/{listing.id}/",
        tag=dedup_key(row),
        topic=topic(row),
        listing_id=listing.id,
        price=price,
        urgency="high" if watch.trigger == Trigger.BACK_IN_STOCK else "normal",
        price_note=unknown if fresh.shipping is None else "",
        icon=listing.image_url,
        data=data,
    )


def shipping_text(shipping: int | None) -> str:
    """Shipping as a message says it: free, a fee, or unknown (never taken for free)."""
    if shipping is None:
        return _("shipping unknown")
    if shipping == 0:
        return _("free shipping")
    return _("shipping %(fee)s") % {"fee": yen(shipping)}


def local_day(moment: dt.datetime) -> dt.date:
    return moment.astimezone(zoneinfo.ZoneInfo(DEDUP_ZONE)).date()
