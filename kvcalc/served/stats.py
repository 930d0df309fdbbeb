"""A run's statistics as `vllm bench serve` computes them: mean, median and P99 of each
metric in milliseconds, percentiles by numpy.percentile's default rule."""

from __future__ import annotations

__all__ = ["percentile", "stats"]


def percentile(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear interpolation), as vllm bench serve takes it."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(name: str, values: list[float], weights: list[int] | None = None) -> dict:
    """mean, median and p99 of `values` in ms (`weights`: how many times each counts)."""
    if weights is not None:  # expand step gaps by how many requests saw each
        if not values:
            return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"p99_{name}_ms": 0.0}
        total = sum(weights)
        mean = sum(v * n for v, n in zip(values, weights)) / total
        pairs = sorted(zip(values, weights))

        def pct(q: float) -> float:
            pos = (total - 1) * q / 100
            lo_i, hi_i = int(pos), min(int(pos) + 1, total - 1)
            out, seen = [], 0
            for v, n in pairs:
                while len(out) < 2 and seen + n > (lo_i if not out else hi_i):
                    out.append(v)
                seen += n
                if len(out) == 2:
                    break
            while len(out) < 2:
                out.append(pairs[-1][0])
            return out[0] + (out[1] - out[0]) * (pos - lo_i)

        return {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": pct(50) * 1e3,
                f"p99_{name}_ms": pct(99) * 1e3}
    mean = sum(values) / len(values) if values else 0.0
    return {f"mean_{name}_ms": mean * 1e3, f"median_{name}_ms": percentile(values, 50) * 1e3,
            f"p99_{name}_ms": percentile(values, 99) * 1e3}
