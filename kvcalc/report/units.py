"""Numbers as people read them: bytes in decimal and binary units, counts with SI
prefixes, seconds, rates.

Pure text, no kvcalc import: the bottom layer, so that any module (estimate's notes,
measure's messages) may format a figure without loading the report's tables or rich.
Bytes are shown beside both units, GB (10^9) and GiB (2^30), each labelled.
"""

from __future__ import annotations

import math
import sys

DECIMAL_UNITS = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))

BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _scaled(n: int, units: tuple[tuple[str, int], ...], suffix: str = "B") -> str:
    for name, size in units:
        if abs(n) >= size:
            x = n / size
            return f"{x:.3g} {name}" if abs(x) < 1000 else f"{x:,.0f} {name}"
    return f"{n} {suffix}"


def human_bytes(n: int) -> str:
    """'9.66 GB / 9 GiB': decimal and binary, both named."""
    if abs(n) < 1000:
        return f"{n} B"
    return f"{_scaled(n, DECIMAL_UNITS)} / {_scaled(n, BINARY_UNITS)}"


def exact_bytes(n: int) -> str:
    """'9,663,676,416 B (9.66 GB / 9 GiB)'."""
    return f"{n:,} B" if abs(n) < 1000 else f"{n:,} B ({human_bytes(n)})"


def human_count(n: float, unit: str = "") -> str:
    """1.75e11 -> '175 G' (SI prefixes, for parameters and FLOPs)."""
    for name, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.4g} {name}{unit}"
    return f"{n:.4g} {unit}".rstrip()


def human_seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for name, size in (("s", 1.0), ("ms", 1e-3), (_MICRO + "s", 1e-6)):
        if abs(s) >= size:
            return f"{s / size:.4g} {name}"
    return f"{s * 1e9:.4g} ns"


def _micro() -> str:
    """'µ', or 'u' where stdout cannot show it (PYTHONIOENCODING=ascii)."""
    try:
        "µ".encode(getattr(sys.stdout, "encoding", None) or "utf-8")
        return "µ"
    except (UnicodeEncodeError, LookupError):
        return "u"


_MICRO = _micro()


def human_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def count_words(n: int) -> str:
    """8030261248 -> '8.03B' (parameters, as model cards write them)."""
    for name, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{name}"
    return str(n)
