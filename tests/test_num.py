"""kvcalc.ground.num.exact_ratio reads a number as fractions.Fraction(str(value)) does (the
truth here), without importing fractions at start-up. Its grammar is Python 3.11's on
every version: Fraction took underscores between digits only from 3.11 on, so on 3.10
texts with one are held to 3.11's reading by the published examples alone."""

import sys
from fractions import Fraction

import pytest

from kvcalc.ground.num import MAX_EXPONENT, exact_ratio

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, strategies as st  # noqa: E402

UNDERSCORES = sys.version_info >= (3, 11)  # Fraction("1_000") reads only from 3.11


def _huge_exponent(text: str):
    """Fraction's own reading of `text` when its exponent is beyond any kvcalc reads:
    ("zero", "huge") for a zero or non-zero mantissa, else None. Fraction computes
    10 ** exp even for those (a drawn '9e1212121212' never returns), so the truth for them
    is stated, not computed: kvcalc refuses the non-zero ones and reads zero as zero."""
    import fractions

    m = fractions._RATIONAL_FORMAT.match(text)
    if m is None or not m.group("exp"):
        return None
    exp = m.group("exp").replace("_", "")
    if len(exp.lstrip("+-").lstrip("0")) <= len(str(MAX_EXPONENT)) + 1:
        return None
    digits = (m.group("num") or "") + (m.group("decimal") or "")
    return "zero" if not digits.replace("_", "").strip("0") else "huge"


def _fraction(value):
    try:
        f = Fraction(str(value))
    except (ValueError, ZeroDivisionError) as e:
        return type(e)
    return f.numerator, f.denominator


def _ours(value):
    try:
        return exact_ratio(value)
    except (ValueError, ZeroDivisionError) as e:
        return type(e)


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers())
def test_numbers_read_as_fraction_reads_their_text(x):
    assert _ours(x) == _fraction(x)


# Text from the grammar's own pieces, well and badly joined.
_PIECES = st.sampled_from(["", " ", "+", "-", "0", "1", "9", "12", "0_1", "_", "__", ".", "/",
                           "e", "E", "e-", "e+", "3", "00", "x", "nan", "inf", ",", "d", "\u0663"])


@given(st.lists(_PIECES, max_size=8).map("".join))
def test_text_reads_as_fraction_reads_it(text):
    assume(UNDERSCORES or "_" not in text)
    huge = _huge_exponent(text)
    if huge is not None:
        assert _ours(text) == ((0, 1) if huge == "zero" else ValueError), text
        return
    ours, truth = _ours(text), _fraction(text)
    if ours is ValueError and isinstance(truth, tuple):  # refused: a huge exponent only
        assert truth[0] and max(abs(truth[0]), truth[1]) > 10 ** MAX_EXPONENT, text
    else:
        assert ours == truth


@pytest.mark.parametrize("text, expected", [
    ("0.9", (9, 10)), ("1e-3", (1, 1000)), ("3/4", (3, 4)), ("-0.50", (-1, 2)), (" 1. ", (1, 1)),
    ("1_000", (1000, 1)), (".5", (1, 2)), ("6/4", (3, 2)), (0.1, (1, 10)),
    ("0e999999999999", (0, 1))])  # zero at any exponent, at once (it once made 10 ** exp)
def test_published_examples(text, expected):
    assert exact_ratio(text) == expected
    if _huge_exponent(str(text)) is None and (UNDERSCORES or "_" not in str(text)):
        assert expected == _fraction(text)


def test_a_huge_exponent_is_refused_not_computed():
    assert exact_ratio(f"1e{MAX_EXPONENT}") == (10 ** MAX_EXPONENT, 1)
    with pytest.raises(ValueError):
        exact_ratio("1e999999999")  # Fraction would build a billion-digit number
