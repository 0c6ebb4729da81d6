"""A marketplace that will not answer until a person acts is halted for the whole fleet.

When a call to a marketplace's adapter answers `config` (`watches.marketplaces.base`: a
retired API version, a missing or refused key or application id, a site or IP address the
registration does not allow), asking again changes nothing until someone fixes a setting or
the registration. The marketplace is then halted: a `MarketplaceHalt` row, written in its own
short transaction, tells every process of the fleet, and

- no request goes to it: every key a caller asks about answers the halt's `config` error
  (`answer`), whose `retry_after` is the time left until the next probe — or, for a caller
  that finds another process sending the probe, the few seconds until its answer;
- but one: at most one request every MARKETPLACE_PROBE_SECONDS, sent by the one process whose
  conditional UPDATE moved `probe_after` on (`may_probe`), for the first key it was asked;
- a probe the marketplace answers with anything but `config` lifts the halt (`record`); the
  poll plan then plans the marketplace again (`within_halts`) and re-fetches ask it again, by
  themselves. A probe that got no answer that says anything of the configuration — network,
  5xx, 429, our own limiter out of reach, a key not worth a request — leaves the halt to the
  next probe. With several application ids the probe goes out under the one whose fault
  halted the marketplace (`MarketplaceHalt.application`): an answer under another would lift
  a halt the next request through the faulty one starts again, every probe interval.

`guard` applies this around one adapter call. `watches.polling.observations.ask` is the one
door of every call (price polling, product polling, intake, the dispatcher's re-fetch), so
none of them has code of its own for it. The log says it once per halt: when it starts, when
its fault changes, when it lifts — not per item, not per run.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import IntegrityError, transaction

from watches.marketplaces.base import FetchError, FetchKind, probe_application
from watches.models import MarketplaceHalt

log = logging.getLogger("watches.marketplaces.halts")

# Answers a probe can get that say nothing of the configuration: the marketplace was not
# reached, failed, or turned the request away before looking at it.
SAYS_NOTHING = frozenset({FetchKind.NETWORK, FetchKind.SERVER, FetchKind.RATE_LIMITED})

# How long a caller that found the probe due but lost it to another process waits for that
# probe's answer (seconds): longer than one request may take, shorter than a dispatch cycle.
PROBE_ANSWER_WAIT = 30.0

# A setting's name as a detail writes it (RAKUTEN_API_VERSION, YAHOO_APP_ID).
_NAME = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")

# What an answer is keyed by: an item code, a JAN code, an Ask.
_K = TypeVar("_K", bound=Hashable)

Send = Callable[[Sequence[_K]], Mapping[_K, Any]]


def guard(source: str, codes: Sequence[_K], send: Send[_K], now: dt.datetime) -> dict[_K, Any]:
    """`send(codes)` — one adapter call that never raises, one answer per code — unless
    `source` is halted: then no request, every code answers the halt's error, except the
    first when this process takes the probe; when that probe lifts the halt, the other codes
    are sent as usual. A `config` answer halts `source` (or keeps it halted) and is answered
    as the halt's error, with the time to the next probe."""
    codes = list(codes)
    halt = halted(source)
    if halt is None:
        answers = dict(send(codes))
        return _as_halted(answers, record(source, answers, now), now)
    if not codes or not may_probe(source, now):
        return dict.fromkeys(codes, answer(halt, now, soon=_probe_in_flight(halt, now)))
    # Under the application whose fault halted it: another's answer says nothing of that one.
    under = probe_application.set(halt.application)
    try:
        probed = dict(send(codes[:1]))
    finally:
        probe_application.reset(under)
    halt = record(source, probed, now, probe=halt)
    if halt is not None:
        # Every code, the probed one too, waits for the halt: a probe that got no answer
        # (network, 5xx, 429) is not a transient failure of the item it was sent for.
        said = {code: a for code, a in probed.items() if not _no_answer(a)}
        return {**dict.fromkeys(codes, answer(halt, now)), **_as_halted(said, halt, now)}
    rest = dict(send(codes[1:])) if len(codes) > 1 else {}
    return _as_halted({**probed, **rest}, record(source, rest, now), now)


def halted(source: str) -> MarketplaceHalt | None:
    """The halt of `source`, or None when it may be asked."""
    return MarketplaceHalt.objects.filter(source=source).first()


def current() -> list[MarketplaceHalt]:
    """Every halted marketplace, by name: for /readyz, /metrics and the admin overview."""
    return list(MarketplaceHalt.objects.order_by("source"))


def may_probe(source: str, now: dt.datetime) -> bool:
    """Whether this process sends the probe of halted `source` now: True for exactly one
    caller once `probe_after` has passed (its conditional UPDATE moved it on by
    MARKETPLACE_PROBE_SECONDS), False for every other, and before then."""
    moved = MarketplaceHalt.objects.filter(source=source, probe_after__lte=now).update(
        probe_after=now + _interval()
    )
    return moved == 1


def record(
    source: str,
    answers: Mapping[_K, Any],
    now: dt.datetime,
    *,
    probe: MarketplaceHalt | None = None,
) -> MarketplaceHalt | None:
    """What `answers` (of one adapter call) tell of `source`'s configuration: a `config`
    answer halts it, or refreshes the words of its halt; the answers of the probe of halt
    `probe` lift that halt — not one started since, which they say nothing of — unless they
    say nothing of the configuration (SAYS_NOTHING). Returns the halt now in force, or
    None."""
    fault = next((a for a in answers.values() if _is_config(a)), None)
    if fault is not None:
        _start(source, fault, now)
    elif probe is not None and any(not _says_nothing(a) for a in answers.values()):
        _lift(probe, now)
    elif probe is None:
        return None  # nothing changed, and the caller found no halt before asking
    return halted(source)


def answer(halt: MarketplaceHalt, now: dt.datetime, *, soon: bool = False) -> FetchError:
    """What every key of a halted marketplace answers without a request: its fault, in the
    adapter's words, due again when the next probe may go out — or, `soon`, when the probe
    another process is sending has been answered (it may lift the halt)."""
    wait = (halt.probe_after - now).total_seconds()
    if soon or wait <= 0:
        wait = min(PROBE_ANSWER_WAIT, settings.MARKETPLACE_PROBE_SECONDS)
    return FetchError(FetchKind.CONFIG, halt.detail, retry_after=wait)


def within_halts(budgets: Mapping[str, int | None], now: dt.datetime) -> dict[str, int | None]:
    """The poll plan's requests per source (None: no budget), each halted marketplace's cut
    to its probe: one request once the probe is due, none before."""
    halts = {halt.source: halt for halt in MarketplaceHalt.objects.filter(source__in=list(budgets))}
    cut: dict[str, int | None] = {}
    for source, budget in budgets.items():
        halt = halts.get(source)
        if halt is None:
            cut[source] = budget
        else:
            probe = 1 if halt.probe_after <= now else 0
            cut[source] = probe if budget is None else min(budget, probe)
    return cut


def settings_named(detail: str) -> list[str]:
    """The settings a halt's detail names (what a person sets to fix it); none when the fix is
    the registration on the marketplace's developer site."""
    names = dict.fromkeys(_NAME.findall(detail))
    return [name for name in names if hasattr(settings, name)]


def _probe_in_flight(halt: MarketplaceHalt, now: dt.datetime) -> bool:
    """Whether, as `halt` was read, another process may be sending a probe right now: the
    probe was due, or one was taken (`probe_after` moved on from a moment after the halt
    began) less than PROBE_ANSWER_WAIT ago."""
    taken = halt.probe_after - _interval()
    recent = taken > halt.since and (now - taken).total_seconds() < PROBE_ANSWER_WAIT
    return halt.probe_after <= now or recent


def _start(source: str, fault: FetchError, now: dt.datetime) -> None:
    detail, application = fault.detail, fault.application
    try:
        with transaction.atomic():
            MarketplaceHalt.objects.create(
                source=source,
                since=now,
                detail=detail,
                application=application,
                probe_after=now + _interval(),
            )
    except IntegrityError:
        # Halted already (by another process, or this was its probe): the fault in its
        # latest words, logged only when they changed (a person fixed one thing, not all).
        changed = MarketplaceHalt.objects.filter(source=source).exclude(detail=detail)
        if changed.update(detail=detail, application=application):
            log.error("%s is still halted, for another configuration fault: %s", source, detail)
        return
    log.error(
        "%s halted: it will not answer until a person acts. %s. Nothing more is asked of it "
        "but one probe every %s s.",
        source,
        detail,
        settings.MARKETPLACE_PROBE_SECONDS,
    )


def _lift(halt: MarketplaceHalt, now: dt.datetime) -> None:
    # By its id: the one process that probed lifts it, and logs it, once; a halt lifted by
    # another probe and started again since (a new row) stands.
    if MarketplaceHalt.objects.filter(pk=halt.pk).delete()[0]:
        log.info(
            "%s answers again: its halt is lifted after %s",
            halt.source,
            _duration(now - halt.since),
        )


def _as_halted(
    answers: dict[_K, Any], halt: MarketplaceHalt | None, now: dt.datetime
) -> dict[_K, Any]:
    """`answers` with each `config` one replaced by the halt's error (which says when the next
    probe may go out)."""
    if halt is None:
        return answers
    error = answer(halt, now)
    return {code: error if _is_config(a) else a for code, a in answers.items()}


def _is_config(result: object) -> bool:
    return isinstance(result, FetchError) and result.kind == FetchKind.CONFIG


def _no_answer(result: object) -> bool:
    """The marketplace was asked and said nothing (network, 5xx, 429)."""
    return (
        isinstance(result, FetchError)
        and result.kind in SAYS_NOTHING
        and not (result.ours or result.unasked)
    )


def _says_nothing(result: object) -> bool:
    return isinstance(result, FetchError) and (
        result.kind in SAYS_NOTHING or result.ours or result.unasked
    )


def _interval() -> dt.timedelta:
    return dt.timedelta(seconds=settings.MARKETPLACE_PROBE_SECONDS)


def _duration(delta: dt.timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
