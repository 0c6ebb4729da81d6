"""JAN codes: what people type or a camera reads, normalised or refused with a reason."""

from __future__ import annotations

import pytest

from watches.products.jan import InvalidJAN, check_digit, is_jan, normalise_jan


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("4901750404406", "4901750404406"),  # JAN-13
        ("4902102072618", "4902102072618"),  # JAN-13, check digit 8
        ("49123456", "49123456"),  # JAN-8
        ("45678905", "45678905"),  # JAN-8
        ("４９０１７５０４０４４０６", "4901750404406"),  # full-width digits
        ("4901750 404406", "4901750404406"),  # a space between groups
        ("4 901750 404406", "4901750404406"),  # as printed under the bars
        ("4901750-404406", "4901750404406"),  # hyphen
        ("4901750－404406", "4901750404406"),  # full-width hyphen-minus
        ("4901750‐404406", "4901750404406"),  # Unicode hyphen
        ("  4901750404406\n", "4901750404406"),  # pasted with whitespace around
        ("４９０１７５０　４０４４０６", "4901750404406"),  # ideographic space
        ("4912-3456", "49123456"),  # JAN-8 with a hyphen
    ],
)
def test_a_valid_code_is_normalised_to_ascii_digits(typed, expected):
    assert normalise_jan(typed) == expected
    assert is_jan(typed)


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("4901750404408", "check_digit"),  # last digit off by one
        ("4901750404460", "check_digit"),  # the last two digits swapped
        ("49123457", "check_digit"),  # JAN-8 with a wrong check digit
        ("490175040440", "length"),  # 12 digits (a UPC-A is not a JAN as typed here)
        ("49017504044069", "length"),  # 14 digits
        ("4912345", "length"),  # 7 digits
        ("", "empty"),
        ("   ", "empty"),
        (None, "empty"),
        (4901750404406, "empty"),  # not text at all
        ("49017504O4406", "not_digits"),  # letter O for zero
        ("4901750.404406", "not_digits"),
        ("٤٩٠١٧٥٠٤٠٤٤٠٩", "not_digits"),  # Arabic-Indic digits are not folded to ASCII
        ("---", "not_digits"),
        ("4" * 65, "too_long"),
    ],
)
def test_a_bad_code_is_refused_with_its_reason(typed, why):
    with pytest.raises(InvalidJAN) as refused:
        normalise_jan(typed)
    assert refused.value.code == why
    assert not is_jan(typed)


def test_the_check_digit_weighs_the_digits_three_and_one_from_the_right():
    assert check_digit("490175040440") == 6
    assert check_digit("4912345") == 6
    assert check_digit("000000000000") == 0
