"""JAN codes (the barcode on a pack): what a person types or a camera reads, to the 8 or 13
digits a marketplace is asked about.

Typed codes come with full-width digits (a Japanese keyboard's default), spaces and hyphens
from copying them off a label; those are folded away. What is left must be 8 digits (JAN-8)
or 13 (JAN-13) with a correct check digit: a mistyped digit is caught here, before a
marketplace is asked about a product that does not exist.
"""

from __future__ import annotations

import unicodedata

# Hyphens and dashes a label or a web page may put between digit groups (after NFKC, which
# already folds the full-width hyphen-minus and the ideographic space).
_SEPARATORS = frozenset(" \t-\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u30fc\uff70")
_LENGTHS = (8, 13)
MAX_INPUT = 64


class InvalidJAN(ValueError):
    """Not a JAN code. `code` says why: empty, too_long, not_digits, length, check_digit."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def check_digit(body: str) -> int:
    """The GS1 check digit of `body` (the code without its last digit): weights 3 and 1
    alternate from the rightmost digit of the body, which weighs 3."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return (10 - total % 10) % 10


def normalise_jan(text: object) -> str:
    """The JAN code in `text` as plain ASCII digits. Raises InvalidJAN."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidJAN("empty")
    if len(text) > MAX_INPUT:
        raise InvalidJAN("too_long")
    folded = unicodedata.normalize("NFKC", text).strip()
    digits = "".join(c for c in folded if c not in _SEPARATORS)
    # isdigit() is true for other scripts' digits too (and superscripts): ASCII only.
    if not digits or not all("0" <= c <= "9" for c in digits):
        raise InvalidJAN("not_digits")
    if len(digits) not in _LENGTHS:
        raise InvalidJAN("length")
    if check_digit(digits[:-1]) != int(digits[-1]):
        raise InvalidJAN("check_digit")
    return digits


def is_jan(text: object) -> bool:
    try:
        normalise_jan(text)
    except InvalidJAN:
        return False
    return True


def typed_jan(text: str) -> str | None:
    """The digits of `text` when it is written as a JAN code is (8 or 13 digits, with the
    separators a label puts between them), whether or not its check digit is right: what a
    search box takes for a JAN code rather than words."""
    if len(text) > MAX_INPUT:
        return None
    folded = unicodedata.normalize("NFKC", text).strip()
    digits = "".join(c for c in folded if c not in _SEPARATORS)
    if len(digits) in _LENGTHS and all("0" <= c <= "9" for c in digits):
        return digits
    return None
