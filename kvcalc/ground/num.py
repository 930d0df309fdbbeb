"""Arithmetic that takes Python ints (exact, no numpy import) or numpy arrays alike.

Formulas are written once over these helpers: `estimate` passes ints and gets exact
ints back; the sweep passes same-shape int64 (or object) arrays and gets arrays.
numpy is imported only when an array comes in. `Linear` is the shape of one
projection matrix, the unit every layer kind lists its tensors in.
"""

from __future__ import annotations

from kvcalc.ground.record import record


def _is_int(x) -> bool:
    return isinstance(x, int)


def minimum(a, b):
    """min(a, b) element-wise."""
    if _is_int(a) and _is_int(b):
        return a if a <= b else b
    import numpy as np

    return np.minimum(a, b)


def cdiv(a, b):
    """Ceiling division for non-negative a and positive b."""
    return -(-a // b)


def split(n, tp: int):
    """One device's share of `n` elements split over `tp` devices (rounded up)."""
    return -(-n // tp)


def largest(holds, lo: int, hi: int) -> int:
    """The largest n in [lo, hi) with holds(n), given holds(lo) and not holds(hi), for a
    `holds` true up to some n and false beyond (a monotone fit): an exact binary search."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid
    return lo


MAX_EXPONENT = 4000  # 1e4000 is beyond every share and size; 1e999999999 would take minutes


def _digits(part: str) -> bool:
    """Decimal digits, single underscores between them (as int() and Fraction take them)."""
    return (part[:1].isdecimal() and part[-1:].isdecimal() and "__" not in part
            and part.replace("_", "").isdecimal())


def exact_ratio(value) -> tuple[int, int]:
    """`value` (an int, a float or their text) read exactly as the decimal it is written
    as: (numerator, denominator) in lowest terms, denominator > 0. "0.9" and the float
    0.9 give (9, 10), not 0.9's binary value; "1e-3" gives (1, 1000), "3/4" (3, 4).

    The grammar and errors of fractions.Fraction(str(value)) in Python 3.11 (a sign,
    digits with single underscores, then "/denominator", or ".decimals" and an exponent;
    spaces around), which tests/test_num.py holds equal; not Fraction itself, whose
    import brings decimal and numbers: a tenth of `kvcalc estimate`'s start-up, as is a
    regular expression's compilation. ValueError for what is not such a number (nan,
    inf, '', an exponent beyond MAX_EXPONENT); ZeroDivisionError for a zero denominator."""
    import math

    text = str(value)
    body = text.strip()
    sign = -1 if body[:1] == "-" else 1
    body = body[1:] if body[:1] in "+-" and body else body
    den_text = exp_text = dec_text = None
    if "/" in body:
        body, den_text = body.split("/", 1)
    else:
        for e in "eE":
            if e in body:
                body, exp_text = body.split(e, 1)
                break
        if "." in body:
            body, dec_text = body.split(".", 1)
    ok = ((_digits(body) or (body == "" and bool(dec_text)))
          and (den_text is None or _digits(den_text))
          and (not dec_text or _digits(dec_text))
          and (exp_text is None
               or _digits(exp_text[1:] if exp_text[:1] in ("+", "-") else exp_text)))
    if not ok:
        raise ValueError(f"not a decimal number: {text!r}")
    num, den = int(body or "0"), 1
    if den_text is not None:
        den = int(den_text)
        if den == 0:
            raise ZeroDivisionError(f"{text!r} has a zero denominator")
    if dec_text:
        scale = 10 ** len(dec_text.replace("_", ""))
        num, den = num * scale + int(dec_text), scale
    if exp_text is not None and num:  # zero is zero at any exponent: 10 ** exp not made
        exp = int(exp_text)
        if abs(exp) > MAX_EXPONENT:
            raise ValueError(f"exponent out of range: {text!r}")
        num, den = (num * 10 ** exp, den) if exp >= 0 else (num, den * 10 ** -exp)
    g = math.gcd(num, den)
    return sign * num // g, den // g


def linear_params(fan_in: int, fan_out: int, bias: bool) -> int:
    """nn.Linear(fan_in, fan_out, bias): weight plus optional bias."""
    return fan_in * fan_out + (fan_out if bias else 0)


@record
class Linear:
    """One nn.Linear(fan_in, fan_out, bias): a weight of fan_out rows by fan_in columns."""

    fan_in: int
    fan_out: int
    bias: bool = False
    module: str = ""  # its attribute name in transformers ("q_proj"); "": the tensor's key
    kv: bool = False  # a K/V projection: it follows its heads under tensor parallelism

    @property
    def params(self) -> int:
        return linear_params(self.fan_in, self.fan_out, self.bias)


def params_by_name(tensors: dict) -> dict[str, int]:
    """Parameters of a layer's `tensors()` (Linear matrices and plain element counts)."""
    return {k: t.params if isinstance(t, Linear) else t for k, t in tensors.items()}


def maximum(a, b):
    """max(a, b) element-wise."""
    if _is_int(a) and _is_int(b):
        return a if a >= b else b
    import numpy as np

    return np.maximum(a, b)


def where(condition, a, b):
    """a where condition holds, else b (element-wise for arrays)."""
    if isinstance(condition, bool):
        return a if condition else b
    import numpy as np

    return np.where(condition, a, b)
