"""CSV text of numeric columns, built with numpy a chunk at a time.

Integers are written exactly (Python's str); floats as Python's format(x, ".12g"),
exactly: the twelve digits come from one correctly rounded multiplication by an exact
power of ten, and the rare value whose rounding that multiplication cannot decide (a
near-tie), or that falls outside the fast path (non-finite, huge, tiny), is formatted by
Python. Every field is a fixed-width block of bytes with NUL where no character goes;
`join_rows` lays the blocks side by side and drops the NULs, which leaves the CSV lines.

The digits and the scalar form (`format_float`, `cell`) are kvcalc.report.csv_json's,
which `estimate --format csv` uses: both commands write the same text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from kvcalc.errors import KvcalcError
from kvcalc.report.csv_json import FLOAT_DIGITS, format_float

_INT64_DIGITS = 19


def _table(texts: Sequence[str], width: int, dtype) -> np.ndarray:
    """Texts as NUL-padded fixed-width entries read as one integer each, so that a
    lookup moves a whole group of characters."""
    raw = b"".join(t.encode().ljust(width, b"\0") for t in texts)
    return np.frombuffer(raw, dtype=dtype)


# Two digits per lookup, padded with NUL where a digit is dropped so that the NULs of
# a field stay together (fewer, longer runs compact faster). _LEAD: the leftmost pair
# of a number (entries 100 + r drop a leading zero, 200 is the number 0); _TRAIL:
# pairs of a fraction (entries 100 + r drop trailing zeros).
_PAIRS = [f"{r:02d}" for r in range(100)]
_LEAD = _table(_PAIRS + [str(r).rjust(2, "\0") if r else "" for r in range(100)] + ["\0" "0"],
               2, np.uint16)
_TRAIL = _table(_PAIRS + [f"{r:02d}".rstrip("0") for r in range(100)], 2, np.uint16)
_EXP_BIAS = 400  # "e-324".."e+308" and beyond, by exponent + bias
_EXPONENT = _table([f"e{'-' if e < 0 else '+'}{abs(e):02d}" for e in range(-_EXP_BIAS, _EXP_BIAS)],
                   8, np.uint64)
_POW10_INT = np.array([10 ** k for k in range(_INT64_DIGITS)], dtype=np.int64)
_POW10_FLOAT = np.array([10.0 ** k for k in range(23)])  # exact up to 1e22
_SIG_LO, _SIG_HI = 10.0 ** (FLOAT_DIGITS - 1), 10.0 ** FLOAT_DIGITS


def _bytes(groups: np.ndarray) -> np.ndarray:
    """(n, g) table entries as the (n, g * itemsize) bytes they stand for."""
    return groups.view(np.uint8).reshape(len(groups), -1)


def _whole(a: np.ndarray) -> np.ndarray:
    """Non-negative int64 values as str(v), right-aligned, NUL-padded bytes."""
    if not len(a):
        return np.zeros((0, 1), dtype=np.uint8)
    groups = max(1, -(-len(str(int(a.max()))) // 2))
    full = (len(str(int(a.min()))) - 1) // 2  # pairs every value fills with two digits
    out = np.empty((len(a), groups), dtype=np.uint16)
    q = a
    for g in range(groups - 1, -1, -1):
        d = q // 100
        r = q - d * 100
        if groups - g <= full:
            out[:, g] = _LEAD[r]
        else:
            idx = r + 100 * (d == 0)  # the leftmost pair drops its leading zero
            if g == groups - 1:
                idx[a == 0] = 200
            out[:, g] = _LEAD[idx]
        q = d
    return _bytes(out)


def _fraction(f: np.ndarray, places: np.ndarray, slots: int) -> np.ndarray:
    """Fractions f / 10**places (0 <= f < 10**places <= 10**slots) as their digits
    after the point, trailing zeros dropped (nothing for 0), NUL-padded bytes."""
    groups = -(-slots // 2)
    f = f * _POW10_INT[2 * groups - places]  # left-align in the slots: only zeros added
    out = np.empty((len(f), groups), dtype=np.uint16)
    rest = np.zeros(len(f), dtype=bool)  # a non-zero digit right of this pair
    for g in range(groups - 1, -1, -1):
        f, r = np.divmod(f, 100)
        out[:, g] = _TRAIL[r + 100 * ~rest]
        rest |= r != 0
    return _bytes(out)


def int_field(col: np.ndarray) -> np.ndarray:
    """Integers (int64, or an object array of Python ints) as str(v), NUL-padded."""
    if col.dtype == object or len(col) == 0 or (col == np.iinfo(np.int64).min).any():
        return _text_field([str(v) for v in col.tolist()])
    neg = col < 0
    if not neg.any():
        return _whole(col)
    sign = np.where(neg, ord("-"), 0).astype(np.uint8)[:, None]
    return np.concatenate([sign, _whole(np.abs(col))], axis=1)


def _text_field(texts: Sequence[str]) -> np.ndarray:
    """Python-formatted texts as a left-aligned NUL-padded (n, width) byte matrix."""
    packed = np.array([t.encode() for t in texts], dtype=bytes)
    width = max(packed.dtype.itemsize, 1)
    return packed.astype(f"S{width}").view(np.uint8).reshape(len(texts), width)


def _significands(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For |x| values: twelve-digit significands, decimal exponents and where both
    are exact (finite, in the fast path's range, not a near-tie)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exp10 = np.floor(np.log10(a))
        exp10 = np.where(np.isfinite(exp10), exp10, 0).astype(np.int64)
        tie = np.zeros(len(a), dtype=bool)
        for _ in range(3):  # log10 may miss by one near a power of ten
            k = (FLOAT_DIGITS - 1) - exp10
            fast = (np.abs(k) <= 22) & np.isfinite(a) & (a > 0)
            p = _POW10_FLOAT[np.where(fast, np.abs(k), 0)]
            # One rounding: p is exact.
            scaled = a * p if (k >= 0).all() else np.where(k >= 0, a * p, a / p)
            # The exact product lies within half an ulp of `scaled`: a fraction that
            # close to .5 could round either way, so Python decides it.
            tie |= np.abs(scaled - np.floor(scaled) - 0.5) <= scaled * 2.3e-16
            sig = np.rint(scaled)
            low, high = sig < _SIG_LO, sig >= _SIG_HI
            if not (fast & (low | high)).any():
                break
            exp10 = exp10 - (fast & low) + (fast & high)
    fast &= ~tie & (sig >= _SIG_LO) & (sig < _SIG_HI)
    return np.where(fast, sig, _SIG_LO).astype(np.int64), exp10, fast


def float_field(col: np.ndarray) -> np.ndarray:
    """Floats as format(x, ".12g"), exactly, NUL-padded bytes."""
    x = np.asarray(col, dtype=np.float64)
    n = len(x)
    a = np.abs(x)
    sig, exp10, fast = _significands(a)
    # 'g': positional for -4 <= exponent < 12, else d.ddde+NN; trailing zeros go.
    positional = (exp10 >= -4) & (exp10 < FLOAT_DIGITS)
    places = np.where(positional, (FLOAT_DIGITS - 1) - exp10, FLOAT_DIGITS - 1)
    places = np.where(fast, places, 0)
    scale = _POW10_INT[places]
    whole, frac = np.divmod(sig, scale)
    parts = [np.where(np.signbit(x), ord("-"), 0).astype(np.uint8)[:, None],
             _whole(np.where(fast, whole, 0))]
    slots = int(places.max()) if n else 0
    if slots:
        parts.append(np.where(frac != 0, ord("."), 0).astype(np.uint8)[:, None])
        parts.append(_fraction(frac, places, slots))
    scientific = fast & ~positional
    if scientific.any():
        parts.append(_bytes(np.where(scientific, _EXPONENT[np.clip(exp10, -_EXP_BIAS, _EXP_BIAS - 1)
                                                           + _EXP_BIAS], 0)[:, None]))
    out = np.concatenate(parts, axis=1)
    slow = ~fast & (a != 0)
    if slow.any():  # zero took the fast layout ("0"); the rest is Python's
        idx = np.flatnonzero(slow)
        texts = _text_field([format_float(v) for v in x[idx].tolist()])
        if texts.shape[1] > out.shape[1]:
            out = np.concatenate([out, np.zeros((n, texts.shape[1] - out.shape[1]), np.uint8)],
                                 axis=1)
        out[idx] = 0
        out[idx, :texts.shape[1]] = texts
    return out


def literal_field(text: str) -> bytes:
    """A field every row shares (a constant column and its separators)."""
    raw = text.encode()
    if b"\0" in raw:
        raise KvcalcError("a model or device name contains a NUL byte")
    return raw


def join_rows(blocks: Sequence[np.ndarray | bytes], n: int) -> np.ndarray:
    """Lay the fields' byte blocks side by side, row by row, and drop the NULs.

    Each block is copied through a structured view of the rows (one opaque item of the
    block's width per row), which numpy copies about twice as fast as a 2-D slice.
    (numpy's boolean compaction releases the GIL, so chunks join in parallel threads;
    bytes.translate, as fast alone, does not.)"""
    widths = tuple(len(b) if isinstance(b, bytes) else b.shape[1] for b in blocks)
    rows = np.empty(n, dtype=_row_dtype(widths))
    for i, (block, w) in enumerate(zip(blocks, widths)):
        if not w:
            continue
        if isinstance(block, bytes):
            rows[f"f{i}"] = np.frombuffer(block, dtype=f"V{w}")[0]
        else:
            rows[f"f{i}"] = np.ascontiguousarray(block).view(f"V{w}").reshape(n)
    flat = rows.view(np.uint8)
    return flat[flat != 0]  # uint8: files take it as bytes without a copy


@functools.lru_cache(maxsize=64)
def _row_dtype(widths: tuple[int, ...]) -> np.dtype:
    """One row of the padded text: field i is `widths[i]` opaque bytes, packed."""
    used = [i for i, w in enumerate(widths) if w]
    return np.dtype({"names": [f"f{i}" for i in used], "formats": [f"V{widths[i]}" for i in used],
                     "offsets": [sum(widths[:i]) for i in used], "itemsize": sum(widths)})
