"""Points as a Japanese shopper counts them: 1 pt is ¥1 off a later purchase, so an offer of
¥1,980 that gives 90 pt costs ¥1,890 (実質価格, `watches.models.net_price`). The marketplaces'
rules as docs/marketplaces.md ("Points") records them, and the words every page, message and
staff view uses for the breakdown: "¥1,980 − 90 pt (5×, until 3/19 13:59) = ¥1,890, free
shipping".

Pure and write-free: the adapters, the pages and the outbox's messages read it alike
([decision](../docs/decisions/0070-points-after-shipping.md)).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from watches.models import net_price

# Campaign windows are written in Japan time ("2026-03-19 13:59"), and shown so.
JAPAN = zoneinfo.ZoneInfo("Asia/Tokyo")
_WINDOW_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")
# A window's end names its last minute: "13:59" holds until 14:00.
_LAST_MINUTE = dt.timedelta(minutes=1)
# Rakuten Ichiba gives its points on the tax-excluded price, one per full ¥100 at the
# standard multiplier (docs/marketplaces.md, "Points").
RAKUTEN_YEN_PER_POINT = 100
# The consumption tax a tax-included price is taken to carry: the standard 10 %. Food at the
# reduced 8 % has a slightly higher tax-excluded price than this finds, so its points are
# counted a little short — never more than the shop gives.
STANDARD_TAX_PERCENT = 10
# The multipliers a campaign may name; anything else is not a multiplier.
MAX_RATE = 100


def tax_excluded(price: int, *, tax_included: bool = True) -> int:
    """The tax-excluded part of `price` (the standard rate; whole yen, rounded down)."""
    return price * 100 // (100 + STANDARD_TAX_PERCENT) if tax_included else price


def with_tax(price: int) -> int:
    """A tax-excluded price as the shopper pays it, at the standard rate: an item at the
    reduced rate (food) is told up to 2 % dearer than it is, never cheaper."""
    return price * (100 + STANDARD_TAX_PERCENT) // 100


def rakuten_points(price: int, rate: int, *, tax_included: bool = True) -> int:
    """The points Rakuten Ichiba gives on one item at `price` with multiplier `rate` (1 the
    standard 1 %): `rate` points per full ¥100 of its tax-excluded price."""
    return tax_excluded(price, tax_included=tax_included) // RAKUTEN_YEN_PER_POINT * rate


def window_time(text: str) -> dt.datetime | None:
    """A campaign window's time as the marketplace writes it ("YYYY-MM-DD HH:MM", Japan
    time), or None for an empty one. Raises ValueError for anything else."""
    if text == "":
        return None
    for fmt in _WINDOW_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).replace(tzinfo=JAPAN)
        except ValueError:
            continue
    raise ValueError(text)


def window_end(last_minute: dt.datetime) -> dt.datetime:
    """The moment a window whose end names `last_minute` stops holding."""
    return last_minute + _LAST_MINUTE


def holds(start: dt.datetime | None, end: dt.datetime | None, at: dt.datetime) -> bool:
    """Whether a window from `start` until `end` (exclusive; either may be open) holds at
    `at`."""
    return (start is None or start <= at) and (end is None or at < end)


def last_minute(end: dt.datetime) -> str:
    """A window's end as the shop writes it, in Japan time: "3/19 13:59"."""
    local = (end - _LAST_MINUTE).astimezone(JAPAN)
    return f"{local.month}/{local.day} {local:%H:%M}"


def yen(amount: int | None) -> str:
    return "—" if amount is None else f"¥{amount:,}"


@dataclass(frozen=True)
class Breakdown:
    """An offer's price as the shopper works it out: price, shipping, the points everyone
    gets now (with the campaign's multiplier and end, when there is one), and what only
    premium members get on top — counted only for a device that says it is one."""

    price: int | None
    shipping: int | None
    points: int = 0
    rate: int | None = None
    until: dt.datetime | None = None
    member_points: int = 0
    members: bool = False  # the device says it is a member: its member points count

    @classmethod
    def of(cls, offer: object, *, members: bool = False) -> Breakdown:
        """The breakdown of an observation, a listing as last seen (its points as they are
        now) or a snapshot's facts (`facts`)."""
        points_now = getattr(offer, "points_now", None)
        # A listing's campaign that has ended since it was seen says nothing any more.
        over = getattr(offer, "campaign_on", True) is False
        return cls(
            price=getattr(offer, "price", None),
            shipping=getattr(offer, "shipping", None),
            points=points_now if points_now is not None else getattr(offer, "points", 0) or 0,
            rate=None if over else getattr(offer, "point_rate", None),
            until=None if over else getattr(offer, "points_until", None),
            member_points=getattr(offer, "member_points", 0) or 0,
            members=members,
        )

    @property
    def counted(self) -> int:
        """The points taken off the price."""
        return self.points + (self.member_points if self.members else 0)

    @property
    def net(self) -> int | None:
        return net_price(self.price, self.shipping, self.counted)

    @property
    def campaign(self) -> str:
        """The campaign's words, "(5×, until 3/19 13:59)", or ""."""
        rate = self.rate if self.rate and self.rate > 1 else None
        if rate and self.until:
            return _("(%(rate)s×, until %(end)s)") % {"rate": rate, "end": last_minute(self.until)}
        if rate:
            return _("(%(rate)s×)") % {"rate": rate}
        if self.until:
            return _("(until %(end)s)") % {"end": last_minute(self.until)}
        return ""

    def text(self) -> str:
        """ "¥1,980 − 90 pt (5×, until 3/19 13:59) = ¥1,890, free shipping" in the active
        language; "¥1,980, free shipping" without points. Unknown shipping is said, never
        taken for free."""
        terms, shipping, note = self._terms()
        text = " ".join(terms)
        if shipping:
            text = _("%(price)s, %(shipping)s") % {"price": text, "shipping": shipping}
        return f"{text} {note}" if note else text

    def html(self) -> SafeString:
        """`text()` with each term in a `<span class="term">`: a narrow screen wraps the sum
        between its terms, never inside one."""
        terms, shipping, note = self._terms()
        html = format_html_join(" ", '<span class="term">{}</span>', ((term,) for term in terms))
        if shipping:
            # The catalogue's words, escaped, around our own escaped terms.
            html = mark_safe(  # noqa: S308
                conditional_escape(_("%(price)s, %(shipping)s"))
                % {"price": html, "shipping": format_html('<span class="term">{}</span>', shipping)}
            )
        if note:
            html = format_html('{} <span class="term">{}</span>', html, note)
        return html

    def _terms(self) -> tuple[list[str], str, str]:
        """The sum's terms ("¥1,980", "− 90 pt (5×, until 3/19 13:59)", "= ¥1,890"), what is
        said of shipping after it ("free shipping", "shipping unknown", "" for a fee, which
        is a term), and the note on member-only points not counted ("")."""
        if self.price is None:
            return ["—"], "", ""
        terms = [yen(self.price)]
        if self.shipping:
            terms.append("+ " + _("%(amount)s shipping") % {"amount": yen(self.shipping)})
        if self.points:
            points = f"{self.points:,}"
            if campaign := self.campaign:
                taken = _("%(points)s pt %(campaign)s") % {"points": points, "campaign": campaign}
            else:
                taken = _("%(points)s pt") % {"points": points}
            terms.append("− " + taken)
        if self.members and self.member_points:
            taken = "− " + _("%(points)s pt") % {"points": f"{self.member_points:,}"}
            terms.append(taken + " " + _("(LYP premium)"))
        if len(terms) > 1:
            terms.append(_("= %(net)s") % {"net": yen(self.net)})
        shipping = ""
        if self.shipping is None:
            shipping = _("shipping unknown")
        elif self.shipping == 0:
            shipping = _("free shipping")
        note = ""
        if self.member_points and not self.members:
            note = _("(+%(points)s pt for LYP premium members, not counted)") % {
                "points": f"{self.member_points:,}"
            }
        return terms, shipping, note


@dataclass(frozen=True)
class Facts:
    """An observation's points as a snapshot or an event's data keeps them (`as_facts`),
    read back for a `Breakdown`."""

    price: int | None
    shipping: int | None
    points: int = 0
    point_rate: int | None = None
    points_until: dt.datetime | None = None
    member_points: int = 0


def as_facts(data: object) -> Facts | None:
    """The price facts of a JSON dict (`Observation.as_json`, a detection snapshot), or None
    when it has no price. Anything of the wrong type reads as absent."""
    if not isinstance(data, dict):
        return None
    price = _whole(data.get("price"))
    if price is None:
        return None
    until = data.get("points_until")
    try:
        end = dt.datetime.fromisoformat(until) if isinstance(until, str) else None
    except ValueError:
        end = None
    return Facts(
        price=price,
        shipping=_whole(data.get("shipping")),
        points=_whole(data.get("points")) or 0,
        point_rate=_whole(data.get("point_rate")),
        points_until=end,
        member_points=_whole(data.get("member_points")) or 0,
    )


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
