"""Arithmetic that takes Python ints (exact, no numpy import) or numpy arrays alike.

Formulas are written once over these helpers: `estimate` passes ints and gets exact
ints back; the sweep passes same-shape int64 (or object) arrays and gets arrays.
numpy is imported only when an array comes in. `Linear` is the shape of one
projection matrix, the unit every layer kind lists its tensors in.
"""

from __future__ import annotations

from kvcalc._record import record


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
