"""The vectorised CSV text (kvcalc.sweep.csvtext) against Python's own formatting.

The truth is Python: str(int) for integers and format(x, ".12g") for floats, over
random bit patterns (every binade, subnormals, infinities, NaN), decimal-looking
values, exact ties and the edges of the fast path.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from kvcalc.report.csv_json import cell, format_float
from kvcalc.sweep import csvtext


def texts(mat: np.ndarray) -> list[str]:
    return [bytes(row[row != 0]).decode() for row in mat]


def float_cases() -> np.ndarray:
    rng = np.random.default_rng(7)
    bits = rng.integers(-(2**63), 2**63 - 1, 100_000, dtype=np.int64, endpoint=True)
    anything = np.frombuffer(struct.pack(f"<{len(bits)}q", *bits.tolist()), dtype="<f8")
    decimal = np.round(rng.random(50_000) * 10.0 ** rng.integers(-9, 16, 50_000), 3)
    halves = rng.integers(0, 10**13, 50_000) / 2.0  # x.5 at the 12th digit: exact ties
    ratios = rng.integers(1, 10**9, 50_000) / rng.integers(1, 10**9, 50_000)
    edges = [0.0, -0.0, 1.0, 10.0, 0.1, 1e-4, 1e-5, 9.999999999995e-05, 0.5, 2.5,
             999999999999.5, 999999999999.4, 1e12, 1e11, 123456789012.5, 1e22, 1e23,
             9.999999999999999e22, 1e300, 5e-324, 2.2250738585072014e-308,
             1.7976931348623157e308, float("inf"), float("-inf"), float("nan"),
             100.0, 1234.5, 0.00012345, 12345678901234567890.0]
    powers = [s * 10.0 ** k for k in range(-30, 31) for s in (1.0, -1.0, 0.999999999999, 1.0000000000005)]
    return np.concatenate([anything, decimal, halves, ratios, edges, powers])


def test_floats_are_format_12g():
    values = float_cases()
    got = texts(csvtext.float_field(values))
    want = [format(v, ".12g") for v in values.tolist()]
    bad = [(v, g, w) for v, g, w in zip(values.tolist(), got, want) if g != w]
    assert not bad, bad[:10]
    assert format_float(0.1) == "0.1" and cell(2.0) == "2" and cell(3) == 3


@pytest.mark.parametrize("dtype", ["int64", "object"])
def test_ints_are_str(dtype):
    rng = np.random.default_rng(3)
    values = np.concatenate([
        rng.integers(-(2**63), 2**63 - 1, 50_000, dtype=np.int64, endpoint=True),
        rng.integers(0, 1000, 5_000), 10 ** np.arange(19), 10 ** np.arange(19) - 1,
        [0, -1, np.iinfo(np.int64).max, np.iinfo(np.int64).min]])
    if dtype == "object":
        values = np.array([int(v) * 10**6 for v in values.tolist()], dtype=object)  # beyond int64
    assert texts(csvtext.int_field(values)) == [str(v) for v in values.tolist()]


def test_join_rows_drops_only_the_padding():
    ints = csvtext.int_field(np.array([7, 12345, 0]))
    floats = csvtext.float_field(np.array([0.25, 1e-9, 3.0]))
    out = csvtext.join_rows([b"m,", ints, b",", floats, b"\n"], 3)
    assert out.tobytes() == b"m,7,0.25\nm,12345,1e-09\nm,0,3\n"
