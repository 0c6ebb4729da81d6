"""The `Retry-After` header (RFC 9110, section 10.2.3), read once for every caller: the
marketplaces' rate limits and server errors, and the push services'."""

from __future__ import annotations

import datetime as dt
import email.utils
import re

# However long a server asks for, we wait at most a day: a row, or a marketplace's hold-off,
# stays alive, and a nonsense answer cannot park it for years.
MAX_SECONDS = 24 * 3600.0

# delay-seconds is 1*DIGIT. A fraction is tolerated (some servers send one); a sign, an
# exponent, "nan" or "inf" are not numbers of seconds. Ten digits is already centuries.
_DELAY = re.compile(r"\d{1,10}(?:\.\d{1,6})?")


def parse_retry_after(
    value: str | None, *, now: dt.datetime | None = None, cap: float = MAX_SECONDS
) -> float | None:
    """Seconds to wait, from a Retry-After value: delay-seconds ("120") or an HTTP-date
    (IMF-fixdate, or the obsolete RFC 850 and asctime forms; a date without a zone is GMT, as
    every HTTP-date is). A date in the past is 0. At most `cap` seconds. None when the value
    is missing or is neither form — a negative number, NaN, infinity or garbage."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if _DELAY.fullmatch(value):
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        now = now or dt.datetime.now(dt.UTC)
        seconds = max(0.0, (when - now).total_seconds())
    return min(seconds, cap)
