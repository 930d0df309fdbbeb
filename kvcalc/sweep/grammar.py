"""The SPEC grammar: '8', '1,8,32', 'start:stop:+step', 'start:stop:*factor'.

Kept apart from the sweep's arithmetic so that `kvcalc measure`, which takes SPECs
too, reads them without importing numpy: numpy is imported only when a Spec's
values are asked for as an array (`Spec.at`).
"""

from __future__ import annotations

import re
from functools import cached_property
from numbers import Integral
from typing import Sequence

from kvcalc.ground import units
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import dtype as _dtype
from kvcalc.errors import KvcalcError, quoted

INT64_MAX = (1 << 63) - 1
_INT = re.compile(r"[0-9]+")


@record
class Spec:
    """A parsed SPEC: an explicit list of values or a range, never materialised
    unless asked (a linear range of billions of values stays three numbers)."""

    text: str
    kind: str  # "list", "linear" or "geometric"
    items: tuple[int, ...] = ()  # list and geometric values
    start: int = 0  # linear
    step: int = 0  # linear
    count: int = 0

    @property
    def first(self) -> int:
        return self.start if self.kind == "linear" else self.items[0]

    @property
    def last(self) -> int:
        if self.kind == "linear":
            return self.start + self.step * (self.count - 1)
        return self.items[-1]

    @property
    def min(self) -> int:
        return self.first if self.kind != "list" else min(self.items)

    @property
    def max(self) -> int:
        return self.last if self.kind != "list" else max(self.items)

    @cached_property
    def _array(self):
        import numpy as np

        return np.asarray(self.items, dtype=np.int64)

    def at(self, index):
        """The values at positions `index` (an int64 numpy array)."""
        if self.kind == "linear":
            import numpy as np

            return self.start + self.step * np.asarray(index, dtype=np.int64)
        return self._array[index]

    def values(self) -> list[int]:
        """All values as Python ints (for small SPECs: a list of `count` ints)."""
        if self.kind == "linear":
            return list(range(self.start, self.last + 1, self.step))
        return list(self.items)

    def __len__(self) -> int:
        return self.count


def _spec_error(name: str, text: str, why: str) -> KvcalcError:
    return KvcalcError(f"{name} {quoted(text)}: {why} (SPEC: 8 | 1,8,32 | start:stop:+step | "
                       "start:stop:*factor)")


def _int(name: str, text: str, part: str, what: str) -> int:
    part = part.strip()
    suffixed = units.SUFFIXED.fullmatch(part) if name in units.COUNTS and what != "factor" \
        else None  # 32k = 32,000, 32K = 32,768: vLLM's suffixes (kvcalc.ground.units)
    if suffixed is None and not _INT.fullmatch(part):
        got = f"{quoted(part)} is not a whole number" if part else f"the {what} is missing"
        raise _spec_error(name, text, got)
    digits = part if suffixed is None else suffixed.group(1) + (suffixed.group(2) or "")
    if len(digits.lstrip("0")) > len(str(INT64_MAX)):  # before int(): 5,000 digits raise there
        raise _spec_error(name, text, f"the {what} has {len(digits.lstrip('0')):,} digits; "
                          "it is too large")
    if suffixed is None:
        value = int(part.lstrip("0") or "0")
    else:
        try:
            value = units.scaled(suffixed, name, units.COUNTS[name])
        except KvcalcError as e:
            rest = str(e).removeprefix(f"{name} {quoted(suffixed.group(0))}")
            raise _spec_error(name, text, f"{part}{rest}") from None
    if value <= 0:
        raise _spec_error(name, text, f"the {what} must be positive, got {value}")
    if value > INT64_MAX:
        raise _spec_error(name, text, f"{value} is too large")
    return value


def _int_text(name: str, value: int) -> str:
    """str(value) for an int given through the Python API; beyond int64 (where str()
    of a huge int would fail) a KvcalcError."""
    if abs(value) > INT64_MAX:
        raise KvcalcError(f"{name}: {value.bit_length()}-bit value is too large")
    return str(value)


def _is_int(value) -> bool:
    """An int or a numpy integer (both are numbers.Integral), never a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def parse_spec(text: str | int | Sequence[int] | Spec, name: str = "SPEC") -> Spec:
    """Parse '8', '1,8,32', '1024:1048576:+1024' or '1024:131072:*2' into a Spec.

    Values are positive integers; ranges include `stop` when a step lands on it.
    Any mistake raises a one-line KvcalcError naming `name` (e.g. '--seq-len').
    Ints and sequences of ints are accepted as explicit lists (the Python API).
    """
    if isinstance(text, Spec):
        return text
    if _is_int(text):
        text = _int_text(name, int(text))
    elif not isinstance(text, str):
        items = list(text)
        if not all(_is_int(v) for v in items):
            raise KvcalcError(f"{name}: values must be integers, got {items!r}")
        text = ",".join(_int_text(name, int(v)) for v in items)
    raw = text
    text = text.strip()
    if not text:
        raise _spec_error(name, raw, "it is empty")
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise _spec_error(name, raw, "a range has three parts, start:stop:+step or "
                              "start:stop:*factor")
        start = _int(name, raw, parts[0], "start")
        stop = _int(name, raw, parts[1], "stop")
        op = parts[2].strip()[:1]
        if op not in ("+", "*"):
            raise _spec_error(name, raw, "the step must begin with + (linear) or * (geometric)")
        body = parts[2].strip()[1:]
        if body.strip() and _INT.fullmatch(body.strip()) and not body.strip().strip("0"):
            why = "the step is zero" if op == "+" else "the factor must be at least 2"
            raise _spec_error(name, raw, why)
        step = _int(name, raw, body, "step" if op == "+" else "factor")
        if stop < start:
            raise _spec_error(name, raw, f"stop {stop} is before start {start}")
        if op == "+":
            return Spec(text=text, kind="linear", start=start, step=step,
                        count=(stop - start) // step + 1)
        if step <= 1:
            raise _spec_error(name, raw, f"the factor must be at least 2, got {step}")
        items = [start]
        while items[-1] * step <= stop:
            items.append(items[-1] * step)
        return Spec(text=text, kind="geometric", items=tuple(items), count=len(items))
    items = [_int(name, raw, p, "value") for p in text.split(",")]
    seen: set[int] = set()
    for v in items:
        if v in seen:
            raise _spec_error(name, raw, f"{v} is listed twice")
        seen.add(v)
    return Spec(text=text, kind="list", items=tuple(items), count=len(items))


def parse_names(text: str | Sequence[str], name: str = "--kv-dtype") -> tuple[str, ...]:
    """A comma list of dtype names ('bf16,fp8,int4'), each validated, canonical names."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for p in parts:
        p = p.strip()
        if not p:
            raise KvcalcError(f"{name} {text!r}: empty name in the list")
        canonical = _dtype(p).name
        if canonical in out:
            raise KvcalcError(f"{name} {text!r}: {canonical} is listed twice")
        out.append(canonical)
    return tuple(out)
