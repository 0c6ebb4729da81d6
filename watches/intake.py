"""Listing intake: from what a person pastes (an item code or a marketplace item URL) to a
Listing filled by a first fetch.

A URL is only *parsed* into an item code, never fetched: the only requests made are the
marketplace adapter's own, to the marketplace's API. Every problem becomes an IntakeError whose
message can be shown as is, to staff in admin or to a user on the pages.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.functional import Promise
from django.utils.translation import gettext as _

from common.text import clip
from common.weburl import NotAWebURL, parse_web_url
from watches.marketplaces.base import FetchError, FetchKind, Observation
from watches.models import Listing, Source
from watches.polling.observations import fetch, observe
from watches.products.jan import InvalidJAN, normalise_jan

log = logging.getLogger("watches.intake")

MAX_INPUT = 1000
RAKUTEN_ITEM_HOST = "item.rakuten.co.jp"
YAHOO_ITEM_HOST = "store.shopping.yahoo.co.jp"
# A Yahoo! Shopping item page: /<store id>/<item code>.html; the API's code is store_item.
_YAHOO_PATH = re.compile(r"^/([a-z0-9][a-z0-9-]{0,99})/([a-zA-Z0-9][a-zA-Z0-9_.-]{0,199})\.html$")
# Shop codes and item management numbers: lowercase letters, digits, hyphens, underscores
# (Rakuten lowercases them on registration).
_RAKUTEN_PART = r"[a-z0-9][a-z0-9_-]{0,254}"
_RAKUTEN_CODE = re.compile(rf"^({_RAKUTEN_PART}):({_RAKUTEN_PART})$")
_DEMO_CODE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")


class IntakeError(Exception):
    """A listing could not be added. `message` is safe to show to whoever asked; `code` is a
    short word for tests and logs."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class ItemRef:
    source: str
    item_code: str


def parse_item_ref(text: object) -> ItemRef:
    """An item code or item URL, as typed or pasted, to (source, item code). Raises
    IntakeError; never touches the network."""
    if not isinstance(text, str) or not text.strip():
        raise IntakeError(_("Enter an item code or a Rakuten Ichiba item URL."), code="empty")
    text = text.strip()
    if len(text) > MAX_INPUT:
        raise IntakeError(_("That is too long to be an item code or URL."), code="too_long")
    if any(ord(c) < 32 or c.isspace() for c in text):
        raise IntakeError(
            _("An item code or URL has no spaces or line breaks in it."), code="bad_code"
        )
    lowered = text.lower()
    hosts = (RAKUTEN_ITEM_HOST + "/", YAHOO_ITEM_HOST + "/", "www.", "http:", "https:")
    if "://" in text or lowered.startswith(hosts):
        return _parse_url(text)
    match = _RAKUTEN_CODE.match(lowered)
    if match:
        return _enabled(ItemRef(Source.RAKUTEN, f"{match[1]}:{match[2]}"))
    if _DEMO_CODE.match(lowered):
        return _enabled(ItemRef(Source.DEMO, lowered))
    raise IntakeError(
        _(
            "“%(text)s” is not an item code. Paste the item's URL "
            "(https://item.rakuten.co.jp/shop/item/) or its code (shop:item)."
        )
        % {"text": clip(text, 80)},
        code="bad_code",
    )


def _parse_url(text: str) -> ItemRef:
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text):
        text = "https://" + text
    try:
        url = parse_web_url(text)
    except NotAWebURL as exc:
        raise _url_error(exc.problem) from None
    host, port = url.host.rstrip("."), url.port
    if host == YAHOO_ITEM_HOST and port in (80, 443):
        return _parse_yahoo_path(url.path)
    if host != RAKUTEN_ITEM_HOST:
        if host == "rakuten.co.jp" or host.endswith(".rakuten.co.jp"):
            raise IntakeError(
                _(
                    "That Rakuten page is not an item page. Open the item and paste its "
                    "address (https://item.rakuten.co.jp/shop/item/)."
                ),
                code="not_item_page",
            )
        raise IntakeError(
            _("Yasugoro cannot follow items on %(host)s.") % {"host": clip(host, 60)}
            + " "
            + _what_can_be_added(),
            code="unknown_host",
        )
    if port not in (80, 443):
        raise _url_error("port")
    segments = url.path.split("/")
    # "/shop/item/" or "/shop/item": exactly two non-empty segments.
    if segments[-1] == "":
        segments = segments[:-1]
    segments = segments[1:]
    if len(segments) != 2 or not all(segments):
        raise IntakeError(
            _(
                "That Rakuten address does not point at one item. An item address looks "
                "like https://item.rakuten.co.jp/shop/item/."
            ),
            code="not_item_page",
        )
    shop, item = (segment.lower() for segment in segments)
    code = f"{shop}:{item}"
    if not _RAKUTEN_CODE.match(code):
        raise IntakeError(_("That Rakuten item address is not valid."), code="bad_url")
    return _enabled(ItemRef(Source.RAKUTEN, code))


def _parse_yahoo_path(path: str) -> ItemRef:
    match = _YAHOO_PATH.match(path)
    if not match:
        raise IntakeError(
            _(
                "That Yahoo! Shopping address does not point at one item. An item address "
                "looks like https://store.shopping.yahoo.co.jp/store/item.html."
            ),
            code="not_item_page",
        )
    return _enabled(ItemRef(Source.YAHOO, f"{match[1]}_{match[2]}"))


def _url_error(problem: str) -> IntakeError:
    """What each broken rule of a URL (`common.weburl`) tells the person who pasted it."""
    if problem == "scheme":
        message = _("Only web addresses (https://…) can be added.")
    elif problem == "no_host":
        message = _("That URL has no site in it.")
    elif problem in ("userinfo", "port"):
        message = _("That URL is not a plain item page address.")
    else:
        message = _("That URL is not valid.")
    return IntakeError(message, code="bad_url")


def _enabled(ref: ItemRef) -> ItemRef:
    if ref.source not in settings.MARKETPLACE_ADAPTERS:
        label = Source(ref.source).label
        raise IntakeError(
            _("This Yasugoro is not connected to %(marketplace)s, so its items cannot be added.")
            % {"marketplace": label}
            + " "
            + _what_can_be_added(),
            code="unknown_source",
        )
    return ref


def _what_can_be_added() -> str:
    """What this server can really follow, in words (it depends on its marketplaces)."""
    if Source.YAHOO in settings.MARKETPLACE_ADAPTERS:
        return _(
            "Paste the address of a Yahoo! Shopping item "
            "(https://store.shopping.yahoo.co.jp/store/item.html) or type its JAN code."
        )
    if Source.RAKUTEN in settings.MARKETPLACE_ADAPTERS:
        return _(
            "Paste the address of a Rakuten Ichiba item (https://item.rakuten.co.jp/shop/item/)."
        )
    return _("Here you can watch the demo market's items: search for them above.")


def fetch_first(ref: ItemRef) -> Observation:
    """Ask the marketplace about the item once. Raises IntakeError with what went wrong."""
    label = Source(ref.source).label
    # Through the door every call takes: a bug in the adapter is logged and answers
    # `bad_response`, and a marketplace halted for a configuration fault is not asked.
    result = fetch(ref.source, [ref.item_code])[ref.item_code]
    if isinstance(result, Observation):
        return result
    raise _fetch_error(ref, label, result)


def _fetch_error(ref: ItemRef, label: str | Promise, error: FetchError) -> IntakeError:
    names = {"code": ref.item_code, "marketplace": label}
    if error.kind == FetchKind.NOT_FOUND:
        return IntakeError(_("%(marketplace)s has no item %(code)s.") % names, code="not_found")
    if error.kind == FetchKind.EMPTY:
        return IntakeError(
            _("%(marketplace)s has no offer for %(code)s right now: check the code or URL.")
            % names,
            code="not_found",
        )
    if error.kind == FetchKind.RATE_LIMITED:
        return IntakeError(
            _("%(marketplace)s is busy right now. Try again in a minute.") % names,
            code="unreachable",
        )
    return IntakeError(
        _("%(marketplace)s could not be reached right now. Try again later.") % names,
        code="unreachable",
    )


def save_listing(
    ref: ItemRef,
    observation: Observation,
    *,
    units_per_pack: int | None = None,
    unit_label: str = "",
    category: str = "",
) -> Listing:
    """Create the listing from its first observation, or refresh it if it already exists.
    What the observation says of price, stock and points — the listing's state, its history
    point, its statistics — is kept by the rule polling keeps (`observe`): an item added by
    link is then no different from one polled a moment later."""
    extra = observation.extra or {}
    named: dict[str, object] = {
        "name": observation.name[:500] or ref.item_code,
        "shop_name": observation.shop_name[:200],
        "url": observation.url,
        "image_url": observation.image_url,
    }
    # Staff's values win; the marketplace's (the demo's catalogue) fill what they left empty.
    descriptive = {
        "units_per_pack": units_per_pack or extra.get("units_per_pack") or None,
        "unit_label": unit_label or extra.get("unit_label") or "",
        "category": category or extra.get("category") or "",
        # Yahoo! Shopping gives the item's JAN code: the listing can then join its product.
        "jan": _valid_jan(extra.get("jan")),
    }
    with transaction.atomic():
        listing, created = Listing.objects.get_or_create(
            source=ref.source, item_code=ref.item_code, defaults={**named, **descriptive}
        )
        if not created:
            for name, value in named.items():
                setattr(listing, name, value)
            for name, value in descriptive.items():
                if value and not getattr(listing, name):
                    setattr(listing, name, value)
            listing.save(update_fields=[*named, *descriptive])
        observe([(listing, observation)], timezone.now()).save()
    return listing


def _valid_jan(text: object) -> str:
    try:
        return normalise_jan(text)
    except InvalidJAN:
        return ""


def add_listing(
    text: object,
    *,
    units_per_pack: int | None = None,
    unit_label: str = "",
    category: str = "",
) -> Listing:
    """Parse, fetch once (outside any transaction), and create or refresh the listing."""
    ref = parse_item_ref(text)
    observation = fetch_first(ref)
    return save_listing(
        ref, observation, units_per_pack=units_per_pack, unit_label=unit_label, category=category
    )


def find_or_add(ref: ItemRef) -> Listing:
    """The listing already tracked for `ref`, or a new one from a first fetch. A known item
    is not fetched again: pasting a link must not be a way to make us call a marketplace at
    will (polling keeps known listings fresh anyway)."""
    existing = Listing.objects.filter(source=ref.source, item_code=ref.item_code).first()
    if existing is not None:
        return existing
    return save_listing(ref, fetch_first(ref))
