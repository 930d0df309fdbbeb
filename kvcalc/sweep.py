"""Sweeps: `estimate()` over a grid of configurations, computed column-wise with numpy.

A sweep is the product of SPECs: seq_len x batch x kv_heads x kv_dtype x tp. Its
rows are exactly `estimate(...).as_row()` for each configuration (same columns,
same order, same values), but computed on whole arrays:

- Per (kv_heads, kv_dtype, tp) combination, the model variant and the columns
  that do not vary (parameters, weight bytes, the device's memory after weights).
- The (seq_len, batch) grid is computed by `estimate.row_columns`, the function
  `estimate()` itself uses for its row, called on whole arrays: the formulas
  (kvcalc.formulas, kvcalc.layers) take Python ints or numpy arrays alike, so
  every layer kind a model has is swept with the same arithmetic as one estimate.
- Every combination is still checked against `estimate` at the grid's corners
  (and just past each window) before any row is written.

Integers are int64 while they provably fit (everything grows with seq_len and
batch, so the largest row of a block bounds the block); rows that could pass
2^63 - 1 are computed with Python ints instead, so bytes and FLOPs stay exact.
Floats are float64(a) / float64(b): identical to Python's int / int (what
`estimate` does) when both are below 2^53, otherwise within an ulp or two.

CSV: rows are formatted with numpy (ints as decimal digits, floats with the
shortest repr that round-trips, the same text as Python's repr and as
`report.rows_to_csv` of the same rows), streamed chunk by chunk, so memory stays
bounded whatever the number of rows.

Row order: kv_heads, then tp, then kv_dtype (each as given in its SPEC), then
seq_len, then batch (fastest).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field, replace
from functools import cached_property
from typing import IO, Callable, Iterator, Sequence

import numpy as np

from kvcalc import csvtext, units
from kvcalc._record import record
from kvcalc.errors import KvcalcError, quoted
from kvcalc.estimate import estimate, row_columns, stored_weights, weights_as
from kvcalc.capacity.fit import fit as plain_fit
from kvcalc.roofline import compute_dtype_for, decode_roofline
from kvcalc.dtypes import (
    MAX_BATCH,
    MAX_SEQ_LEN,
    MAX_TP,
    MAX_WIDTH,
    DType,
    WEIGHT_FORMATS,
    check_size,
    dtype as _dtype,
    weight_dtype as _weight_dtype,
)
from kvcalc.formulas.cache import kv_cache, kv_heads_per_device
from kvcalc.formulas.params import param_counts
from kvcalc.spec import Hardware, ModelSpec, base_name

ROW_LIMIT = 50_000_000  # rows above which a sweep needs force=True (--force)
CHUNK_ROWS = 1 << 15  # rows computed and formatted together
INT64_MAX = (1 << 63) - 1
_SAFE_FLOAT = float(1 << 62)  # float64 magnitude test with margin for its rounding

# The columns of Estimate.as_row(), in its order; checked against it at run time.
BASE_COLUMNS = (
    "model", "attention", "layers", "heads", "kv_heads", "head_dim", "seq_len", "batch",
    "kv_dtype", "weight_dtype", "tp", "kv_bytes_per_token", "kv_cache_bytes",
    "kv_cache_bytes_full", "kv_cache_bytes_per_device", "params_total", "params_attention",
    "weight_bytes", "decode_flops", "decode_bytes", "arithmetic_intensity",
    "attention_arithmetic_intensity",
)
HARDWARE_COLUMNS = ("gpu", "roofline_s", "roofline_bound", "tokens_per_s",
                    "free_for_kv_bytes_per_device", "fits")
FLOAT_COLUMNS = ("arithmetic_intensity", "attention_arithmetic_intensity", "roofline_s",
                 "tokens_per_s")
# Columns whose magnitude bounds every intermediate of the kernel (all sums of
# non-negative terms): if these fit in int64, so does everything else.
_BOUNDING = ("kv_cache_bytes_full", "decode_flops", "decode_bytes")


# --------------------------------------------------------------------------------
# SPECs
# --------------------------------------------------------------------------------
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
    def _array(self) -> np.ndarray:
        return np.asarray(self.items, dtype=np.int64)

    def at(self, index: np.ndarray) -> np.ndarray:
        """The values at positions `index` (int64)."""
        if self.kind == "linear":
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
        else None  # 32k = 32,000, 32K = 32,768: vLLM's suffixes (kvcalc.units)
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


def parse_spec(text: str | int | Sequence[int] | Spec, name: str = "SPEC") -> Spec:
    """Parse '8', '1,8,32', '1024:1048576:+1024' or '1024:131072:*2' into a Spec.

    Values are positive integers; ranges include `stop` when a step lands on it.
    Any mistake raises a one-line KvcalcError naming `name` (e.g. '--seq-len').
    Ints and sequences of ints are accepted as explicit lists (the Python API).
    """
    if isinstance(text, Spec):
        return text
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        text = _int_text(name, int(text))
    elif not isinstance(text, str):
        items = list(text)
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
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


# --------------------------------------------------------------------------------
# The plan: one Combo per (kv_heads, kv_dtype, tp)
# --------------------------------------------------------------------------------
@record
class Combo:
    """One (kv_heads, kv_dtype, tp) combination: the model variant and the settings its
    rows share. Every figure that varies with seq_len and batch comes from
    estimate.row_columns on whole arrays, the function estimate() itself uses."""

    spec: ModelSpec
    kv_dtype: DType
    weight_dtype: DType
    tp: int
    constants: dict  # the row's columns that do not depend on seq_len or batch
    hardware: Hardware | None = None
    scale_bytes: int = 0
    encoder_seq_len: int | None = None
    free_bytes: int | None = None  # device memory after this combination's weights
    stored: object = None  # kvcalc.formulas.step.StoredWeights: quantized weights as stored

    @property
    def kv_heads(self) -> int:
        return self.spec.kv_heads

    @property
    def windows(self) -> tuple[int, ...]:
        """Window and chunk sizes of the model's layers, where the cache stops growing."""
        return tuple(sorted({getattr(layer.mixer, "window", 0) for layer, _ in self.spec.groups()}
                            - {0}))


@record
class SweepPlan:
    """What to compute: the model, the SPECs, the fixed settings, and the combinations."""

    spec: ModelSpec
    seq_len: Spec
    batch: Spec
    kv_heads: tuple[int, ...]
    kv_dtypes: tuple[str, ...]
    tps: tuple[int, ...]
    weight_dtype: str  # the dtype's name (bf16 when the weights are as stored)
    hardware: Hardware | None
    scale_bytes: int
    encoder_seq_len: int | None
    memory_fraction: float | str
    reserve_bytes: int
    combos: tuple[Combo, ...]
    skipped: tuple[str, ...] = ()  # combinations estimate() rejects, when skip_invalid
    weight_arg: str | None = None  # --weight-dtype as given (None: as the config stores)
    group_size: int | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return BASE_COLUMNS + (HARDWARE_COLUMNS if self.hardware is not None else ())

    @property
    def rows_per_combo(self) -> int:
        return self.seq_len.count * self.batch.count

    @property
    def rows(self) -> int:
        return self.rows_per_combo * len(self.combos)


def _combo(spec: ModelSpec, kdt: DType, wdt: DType, tp: int, hw: Hardware | None,
           scale_bytes: int, encoder_seq_len: int | None, memory_fraction,
           reserve_bytes: int, quantization=None) -> Combo:
    kv_heads_per_device(spec, tp)  # raises on a bad tp
    stored = stored_weights(spec, quantization, tp)
    params = param_counts(spec)
    cache = kv_cache(spec, 1, 1, kdt, tp, scale_bytes, encoder_seq_len)
    constants = {
        "model": spec.name, "attention": spec.attention_kind, "layers": spec.layers,
        "heads": spec.heads, "kv_heads": spec.kv_heads, "head_dim": spec.head_dim,
        "kv_dtype": kdt.name, "weight_dtype": wdt.name, "tp": tp,
        "kv_bytes_per_token": cache.bytes_per_token,
        "params_total": params.total, "params_attention": params.attention,
        "weight_bytes": stored.total if stored else wdt.nbytes(params.total),
    }
    free = None
    if hw is not None:
        free = plain_fit(spec, hw, 1, 1, wdt, kdt, tp, scale_bytes, memory_fraction,
                         reserve_bytes, None, stored.per_device if stored else None
                         ).free_for_kv_bytes
        constants["gpu"] = hw.name
        constants["free_for_kv_bytes_per_device"] = free
    return Combo(spec=spec, kv_dtype=kdt, weight_dtype=wdt, tp=tp, constants=constants,
                 hardware=hw, scale_bytes=scale_bytes, encoder_seq_len=encoder_seq_len,
                 free_bytes=free, stored=stored)


def _as_tuple(value, name: str, upper: int) -> tuple[int, ...]:
    spec = parse_spec(value, name)
    if spec.count > 4096:
        raise KvcalcError(f"{name} {spec.text!r} has {spec.count:,} values; at most 4,096 allowed")
    check_size(name.lstrip("-").replace("-", "_"), spec.max, upper)
    return tuple(spec.values())


def variant(spec: ModelSpec, kv_heads: int) -> ModelSpec:
    """The model with `kv_heads` K/V heads, as `--kv-heads` makes it (unchanged if equal)."""
    return spec if kv_heads == spec.kv_heads else spec.with_kv_heads(kv_heads)


def plan_sweep(
    spec: ModelSpec,
    seq_len: str | int | Sequence[int] | Spec,
    batch: str | int | Sequence[int] | Spec = 1,
    kv_heads: str | int | Sequence[int] | Spec | None = None,
    kv_dtype: str | Sequence[str] = "bf16",
    tp: str | int | Sequence[int] | Spec = 1,
    weight_dtype: DType | str | None = None,
    hardware: Hardware | None = None,
    scale_bytes: int = 0,
    encoder_seq_len: int | None = None,
    memory_fraction: float | str = 1,
    reserve_bytes: int = 0,
    force: bool = False,
    group_size: int | None = None,
    skip_invalid: bool = False,
    check: bool = True,
    make_variant: Callable[[int], ModelSpec] | None = None,
) -> SweepPlan:
    """Validate a sweep and work out its combinations; nothing per row is computed yet.

    Arguments are those of `estimate()`, where seq_len, batch, kv_heads, kv_dtype
    and tp may be SPECs (strings), ints or lists. kv_heads=None keeps the model's;
    MLA models have no K/V heads to sweep. A (kv_heads, tp) pair estimate() would
    reject raises, or with skip_invalid is left out and named in `plan.skipped`.
    More than ROW_LIMIT rows needs force=True. With check=True every combination
    is compared with estimate() at the grid's corners (a few ms in all).
    `make_variant(kv_heads)` builds each K/V-head variant (default `variant`; the
    CLI passes its own, so that rows match `kvcalc estimate --kv-heads` exactly).
    """
    seq = parse_spec(seq_len, "--seq-len")
    bat = parse_spec(batch, "--batch")
    check_size("seq_len", seq.max, MAX_SEQ_LEN)
    check_size("batch", bat.max, MAX_BATCH)
    if kv_heads is None:
        heads = (spec.kv_heads,)
    else:
        if spec.attention_free:
            raise KvcalcError(f"{spec.name} has no attention ({spec.state_mixers} layers "
                              "only): there are no K/V heads to sweep; drop --kv-heads")
        if spec.mla is not None:
            raise KvcalcError(f"{spec.name} uses MLA: its cache is one shared latent, so there "
                              "are no K/V heads to sweep; drop --kv-heads")
        heads = _as_tuple(kv_heads, "--kv-heads", MAX_WIDTH)
    kdts = parse_names(kv_dtype, "--kv-dtype")
    tps = _as_tuple(tp, "--tp", MAX_TP)
    # None: weights as the config stores them (quantization_config, else bf16).
    wdt = _dtype("bf16") if weight_dtype is None else (
        weight_dtype if isinstance(weight_dtype, DType) else _weight_dtype(weight_dtype))
    weight_arg = None if weight_dtype is None else wdt.name
    if isinstance(weight_dtype, str) and weight_dtype.strip().lower() in WEIGHT_FORMATS:
        weight_arg = weight_dtype.strip().lower()  # awq, gptq: their layout, int4 values
    quantization = weights_as(spec, weight_arg, group_size)
    if encoder_seq_len is not None:
        check_size("encoder_seq_len", encoder_seq_len, MAX_SEQ_LEN)

    total = seq.count * bat.count * len(heads) * len(kdts) * len(tps)
    if total > ROW_LIMIT and not force:
        raise KvcalcError(f"the sweep has {total:,} rows, over the {ROW_LIMIT:,}-row limit; "
                          "narrow a SPEC or pass --force")

    combos: list[Combo] = []
    skipped: list[str] = []
    for g in heads:
        try:
            spec_g = make_variant(g) if make_variant is not None else variant(spec, g)
        except KvcalcError as e:
            if not skip_invalid:
                raise KvcalcError(f"--kv-heads {g}: {e}") from None
            skipped.append(f"kv_heads={g}: {e}")
            continue
        for t in tps:
            try:
                kv_heads_per_device(spec_g, t)
            except KvcalcError as e:
                if not skip_invalid:
                    raise KvcalcError(f"kv_heads={g}, tp={t}: {e} (--skip-invalid leaves such "
                                      "combinations out)") from None
                skipped.append(f"kv_heads={g}, tp={t}: {e}")
                continue
            for kname in kdts:
                combos.append(_combo(spec_g, _dtype(kname), wdt, t, hardware, scale_bytes,
                                     encoder_seq_len, memory_fraction, reserve_bytes,
                                     quantization))
    if not combos:
        raise KvcalcError("no valid combination left to sweep: " + "; ".join(skipped))
    plan = SweepPlan(spec=spec, seq_len=seq, batch=bat, kv_heads=heads, kv_dtypes=kdts, tps=tps,
                     weight_dtype=wdt.name, weight_arg=weight_arg, group_size=group_size,
                     hardware=hardware, scale_bytes=scale_bytes,
                     encoder_seq_len=encoder_seq_len, memory_fraction=memory_fraction,
                     reserve_bytes=reserve_bytes, combos=tuple(combos), skipped=tuple(skipped))
    if check:
        for combo in plan.combos:
            _check_against_estimate(plan, combo)
    return plan


# --------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------
def _kernel(c: Combo, S, B, hardware: bool) -> dict:
    """The varying columns for arrays S (seq_len) and B (batch) of equal shape.

    Works on int64 arrays (fast), object arrays of Python ints (exact, any size)
    and float64 arrays (magnitudes only, for the overflow test): estimate.row_columns
    and the formulas under it take any of them.
    """
    return row_columns(c.spec, S, B, c.kv_dtype, c.weight_dtype, c.tp,
                       c.hardware if hardware else None, c.scale_bytes, c.encoder_seq_len,
                       c.free_bytes, c.stored)


def _compute(c: Combo, S: np.ndarray, B: np.ndarray, hardware: bool) -> dict:
    """_kernel on int64, with the rows that could overflow recomputed in Python ints."""
    corner = _kernel(c, np.array([int(S.max())], dtype=object),
                     np.array([int(B.max())], dtype=object), False)
    if max(int(corner[k][0]) for k in _BOUNDING) <= INT64_MAX:
        return _kernel(c, S, B, hardware)
    approx = _kernel(c, S.astype(np.float64), B.astype(np.float64), False)
    big = np.zeros(len(S), dtype=bool)
    for k in _BOUNDING:
        big |= approx[k] >= _SAFE_FLOAT
    exact = _kernel(c, S[big].astype(object), B[big].astype(object), hardware)
    fast = _kernel(c, S[~big], B[~big], hardware) if (~big).any() else None
    out = {}
    for k, v in exact.items():
        col = np.empty(len(S), dtype=object if k not in FLOAT_COLUMNS else np.float64)
        if k in ("roofline_bound", "fits"):
            col = np.empty(len(S), dtype=bool)
        col[big] = v.astype(col.dtype)
        if fast is not None:
            col[~big] = fast[k]
        out[k] = col
    return out


# --------------------------------------------------------------------------------
# Chunks: blocks of rows of one combination
# --------------------------------------------------------------------------------
@record(frozen=False)
class Chunk:
    """Rows [start, stop) of one combination's seq_len x batch grid (batch fastest)."""

    plan: SweepPlan
    combo: Combo
    seq_len: np.ndarray
    batch: np.ndarray
    values: dict = field(default_factory=dict)  # varying columns as arrays
    start: int = 0  # index of the first row in the combination's seq_len x batch grid

    def __len__(self) -> int:
        return len(self.seq_len)

    def column(self, name: str) -> np.ndarray:
        """One column as an array of len(self) (constants broadcast)."""
        if name == "seq_len":
            return self.seq_len
        if name == "batch":
            return self.batch
        if name == "roofline_bound":
            return np.where(self.values[name], "memory", "compute")
        if name in self.values:
            return self.values[name]
        value = self.combo.constants[name]
        big = isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX
        return np.full(len(self), value, dtype=object if big else None)

    def to_frame(self):
        pd = _pandas()

        return pd.DataFrame({name: self.column(name) for name in self.plan.columns})

    def row(self, i: int) -> dict:
        """Row i as a dict of Python values, equal to estimate(...).as_row()."""
        out = {}
        for name in self.plan.columns:
            if name in self.combo.constants:
                out[name] = self.combo.constants[name]
            elif name == "roofline_bound":
                out[name] = "memory" if self.values[name][i] else "compute"
            else:
                out[name] = self.column(name)[i].item() if name in ("seq_len", "batch") \
                    else _python(self.values[name][i])
        return out

    def rows(self) -> Iterator[dict]:
        """Rows as dicts of Python values, equal to estimate(...).as_row()."""
        cols = {}
        for name in self.plan.columns:
            if name in self.combo.constants:
                continue
            cols[name] = (self.column(name).tolist() if name != "roofline_bound"
                          else ["memory" if v else "compute" for v in self.values[name].tolist()])
        for i in range(len(self)):
            consts = self.combo.constants
            yield {name: consts[name] if name in consts else cols[name][i]
                   for name in self.plan.columns}

    def to_csv(self) -> bytes:
        """These rows as CSV lines (no header), byte-identical to report.rows_to_csv."""
        return _format_rows(self).tobytes()

    def csv_buffer(self) -> np.ndarray:
        """to_csv's bytes as a uint8 array (what write_csv hands the file: no copy)."""
        return _format_rows(self)


def _python(value):
    """A numpy scalar as the Python value estimate() gives (int, float or bool)."""
    return value.item() if isinstance(value, np.generic) else value


def _tasks(plan: SweepPlan, chunk_rows: int) -> Iterator[tuple[int, int, int]]:
    per_combo = plan.rows_per_combo
    for i in range(len(plan.combos)):
        for lo in range(0, per_combo, chunk_rows):
            yield i, lo, min(lo + chunk_rows, per_combo)


def _chunk_at(plan: SweepPlan, combo_index: int, lo: int, hi: int) -> Chunk:
    idx = np.arange(lo, hi, dtype=np.int64)
    n_b = plan.batch.count
    S = plan.seq_len.at(idx // n_b)
    B = plan.batch.at(idx % n_b)
    combo = plan.combos[combo_index]
    return Chunk(plan, combo, S, B, _compute(combo, S, B, plan.hardware is not None), start=lo)


def chunks(plan: SweepPlan, chunk_rows: int = CHUNK_ROWS) -> Iterator[Chunk]:
    """Compute the sweep block by block (memory bounded by chunk_rows)."""
    for task in _tasks(plan, chunk_rows):
        yield _chunk_at(plan, *task)


def _pandas():
    try:
        import pandas
    except ImportError:
        raise KvcalcError("DataFrames need pandas: pip install 'kvcalc[pandas]'") from None
    return pandas


def sweep_frame(spec: ModelSpec, seq_len, batch=1, **kwargs):
    """The sweep as one pandas DataFrame (columns of Estimate.as_row()); the
    arguments are plan_sweep's.

    For big sweeps use `plan_sweep` + `write_csv` or `write_parquet` (streamed), or
    `chunks`. Needs pandas (pip install 'kvcalc[pandas]').
    """
    pd = _pandas()

    plan = plan_sweep(spec, seq_len, batch, **kwargs)
    if plan.rows > 5_000_000 and not kwargs.get("force"):
        raise KvcalcError(f"{plan.rows:,} rows is too many for one DataFrame; use write_csv "
                          "or chunks, or pass force=True")
    frames = [c.to_frame() for c in chunks(plan)]
    return pd.concat(frames, ignore_index=True)


def iter_rows(plan: SweepPlan) -> Iterator[dict]:
    """Every row as a dict of Python values (slow; for tests and small sweeps)."""
    for chunk in chunks(plan):
        yield from chunk.rows()


# --------------------------------------------------------------------------------
# Checking the kernel against estimate()
# --------------------------------------------------------------------------------
def reference_row(plan: SweepPlan, combo: Combo, seq_len: int, batch: int) -> dict:
    """estimate(...).as_row() for one configuration of the plan.

    The hardware columns are those estimate() gives (its roofline and fit);
    only min_tp_that_fits, which no row shows, is not searched for.
    """
    wdt = _dtype(plan.weight_dtype)
    est = estimate(combo.spec, seq_len, batch, combo.kv_dtype, plan.weight_arg, combo.tp, None,
                   plan.scale_bytes, plan.encoder_seq_len, plan.memory_fraction,
                   plan.reserve_bytes, group_size=plan.group_size)
    if plan.hardware is not None:
        hw = plan.hardware
        est = replace(
            est, hardware=hw,
            roofline=decode_roofline(est.decode, hw, compute_dtype_for(wdt)),
            fit=plain_fit(combo.spec, hw, seq_len, batch, wdt, combo.kv_dtype, combo.tp,
                          plan.scale_bytes, plan.memory_fraction, plan.reserve_bytes,
                          plan.encoder_seq_len,
                          combo.stored.per_device if combo.stored else None))
    return est.as_row()


def rows_equal(a: dict, b: dict, rel: float = 1e-12) -> list[str]:
    """Columns where two rows differ: ints, strings and bools exactly, floats to `rel`."""
    bad = [k for k in a.keys() ^ b.keys()]
    if list(a) != list(b):
        bad.append("(column order)")
    for k in a.keys() & b.keys():
        x, y = a[k], b[k]
        if isinstance(x, float) or isinstance(y, float):
            if not abs(x - y) <= rel * max(abs(x), abs(y)):
                bad.append(k)
        elif x != y or type(x) is not type(y):
            bad.append(k)
    return bad


def _check_against_estimate(plan: SweepPlan, combo: Combo) -> None:
    points = {(plan.seq_len.min, plan.batch.min), (plan.seq_len.max, plan.batch.max)}
    for window in combo.windows:
        if plan.seq_len.min <= window < plan.seq_len.max:
            points.add((window + 1, plan.batch.max))
    for s, b in sorted(points):
        S = np.array([s], dtype=object)
        B = np.array([b], dtype=object)
        chunk = Chunk(plan, combo, np.array([s], dtype=np.int64), np.array([b], dtype=np.int64),
                      _kernel(combo, S, B, plan.hardware is not None))
        got = next(chunk.rows())
        want = reference_row(plan, combo, s, b)
        if list(want) != list(plan.columns):
            raise KvcalcError("internal: Estimate.as_row() has columns "
                              f"{list(want)}; kvcalc.sweep writes {list(plan.columns)}")
        bad = rows_equal(got, want)
        if bad:
            raise KvcalcError(f"internal: the sweep engine disagrees with estimate() for "
                              f"{combo.spec.name} at seq_len={s}, batch={b} on {', '.join(bad)}; "
                              "kvcalc.sweep must follow kvcalc.formulas")


# --------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------
def _csv_text(values: Sequence) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([csvtext.cell(v) for v in values])
    return buf.getvalue()[:-1]


def csv_header(plan: SweepPlan) -> bytes:
    return (_csv_text(plan.columns) + "\n").encode()


def _runs(col: np.ndarray, field) -> np.ndarray:
    """field(col), formatting each run of equal values once (seq_len repeats per
    batch, and so does everything that depends on seq_len alone)."""
    n = len(col)
    change = np.flatnonzero(col[1:] != col[:-1]) + 1 if n > 1 else np.zeros(0, np.int64)
    if len(change) > n // 4:
        return field(col)
    starts = np.concatenate(([0], change))
    return np.repeat(field(col[starts]), np.diff(np.concatenate((starts, [n]))), axis=0)


def _batch_text(chunk: Chunk) -> np.ndarray:
    """The batch column: its values cycle, so format the SPEC's values once and index."""
    spec = chunk.plan.batch
    n = len(chunk)
    if spec.count >= n:
        return csvtext.int_field(chunk.batch)
    table = csvtext.int_field(spec.at(np.arange(spec.count)))
    return table[(np.arange(chunk.start, chunk.start + n)) % spec.count]


def _words(flags: np.ndarray, yes: bytes, no: bytes) -> np.ndarray:
    return np.where(flags, yes, no).view(np.uint8).reshape(len(flags), -1)


def _int_block(col: np.ndarray, formatted: list) -> np.ndarray:
    """csvtext.int_field(col), reusing the block of an equal column already formatted
    (the cache total, the full-attention total and the per-device share are often the
    same numbers)."""
    for seen, block in formatted:
        if seen.dtype == col.dtype and np.array_equal(seen, col):
            return block
    block = csvtext.int_field(col)
    formatted.append((col, block))
    return block


def _format_rows(chunk: Chunk) -> np.ndarray:
    """The CSV lines of a chunk: each field a block of bytes (kvcalc.csvtext),
    constant fields and separators literal runs, joined row by row."""
    consts = chunk.combo.constants
    blocks: list = []
    literal: list[str] = []
    formatted: list[tuple[np.ndarray, np.ndarray]] = []
    for i, name in enumerate(chunk.plan.columns):
        sep = "," if i else ""
        if name in consts:
            literal.append(sep + _csv_text([consts[name]]))
            continue
        literal.append(sep)
        blocks.append(csvtext.literal_field("".join(literal)))
        literal = []
        if name == "seq_len":
            blocks.append(_runs(chunk.seq_len, csvtext.int_field))
        elif name == "batch":
            blocks.append(_batch_text(chunk))
        elif name == "roofline_bound":
            blocks.append(_words(chunk.values[name], b"memory", b"compute"))
        elif name == "fits":
            blocks.append(_words(chunk.values[name], b"True", b"False"))
        elif name in FLOAT_COLUMNS:
            blocks.append(_runs(chunk.values[name], csvtext.float_field))
        else:
            blocks.append(_int_block(chunk.values[name], formatted))
    literal.append("\n")
    blocks.append(csvtext.literal_field("".join(literal)))
    return csvtext.join_rows(blocks, len(chunk))


def keep_freed_memory() -> None:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the OS.

    Each chunk allocates and frees some tens of MB of arrays; by default glibc maps
    and unmaps blocks that big, and the process spends a third of its time in the
    kernel faulting fresh zeroed pages in. Called by `kvcalc sweep` (a process of its
    own); elsewhere (no glibc) it does nothing.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 1 << 30)
    mallopt(m_trim_threshold, 1 << 30)


def _threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _in_order(plan: SweepPlan, work: Callable[[Chunk], object], chunk_rows: int,
              threads: int | None) -> Iterator[tuple[Chunk, object]]:
    """(chunk, work(chunk)) for every chunk, in order, computed in `threads` threads
    (numpy and pyarrow release the GIL for nearly all of it), at most two per thread
    in flight so memory stays bounded."""
    threads = threads or _threads()

    def run(task: tuple[int, int, int]) -> tuple[Chunk, object]:
        chunk = _chunk_at(plan, *task)
        return chunk, work(chunk)

    if threads == 1:
        for task in _tasks(plan, chunk_rows):
            yield run(task)
        return
    pending: deque = deque()
    with ThreadPoolExecutor(threads, thread_name_prefix="kvcalc-sweep") as pool:
        try:
            for task in _tasks(plan, chunk_rows):
                pending.append(pool.submit(run, task))
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def write_csv(plan: SweepPlan, out: IO[bytes], header: bool = True,
              progress: Callable[[Chunk], None] | None = None,
              chunk_rows: int = CHUNK_ROWS, threads: int | None = None) -> int:
    """Stream the sweep as CSV to a binary file object; returns the rows written.

    `progress` is called after each chunk is handed to the writer thread, with the
    chunk, in the calling thread.
    """
    from kvcalc.report import WriteBehind

    rows = 0
    # The writes go on in a thread of their own: chunks are computed while the disk
    # (page-cache copies, writeback, a slow pipe) takes the previous ones.
    with WriteBehind(out) as behind:
        if header:
            behind.write(csv_header(plan))
        for chunk, text in _in_order(plan, Chunk.csv_buffer, chunk_rows, threads):
            behind.write(memoryview(text))
            rows += len(chunk)
            if progress is not None:
                progress(chunk)
    return rows


PARQUET_MISSING = "Parquet output needs pyarrow: pip install 'kvcalc[parquet]'"


def has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def _arrow_table(chunk: Chunk):
    import pyarrow as pa

    columns = {}
    for name in chunk.plan.columns:
        if name in chunk.combo.constants:
            value = chunk.combo.constants[name]
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
                raise KvcalcError(f"{name} = {value:,} does not fit Parquet's 64-bit integers; "
                                  "write CSV (-o FILE.csv), which holds any integer")
            columns[name] = pa.repeat(value, len(chunk))
            continue
        col = chunk.column(name)
        if col.dtype == object:
            raise KvcalcError(f"{name} exceeds 64-bit integers in this sweep, which Parquet "
                              "cannot hold; write CSV (-o FILE.csv), which holds any integer")
        columns[name] = pa.array(col)
    return pa.table(columns)


def write_parquet(plan: SweepPlan, out: IO[bytes],
                  progress: Callable[[Chunk], None] | None = None,
                  chunk_rows: int = CHUNK_ROWS, threads: int | None = None) -> int:
    """Stream the sweep as Parquet (one row group per chunk, zstd) to a binary file
    object; returns the rows written. Needs pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise KvcalcError(PARQUET_MISSING) from None
    rows = 0
    writer = None
    try:
        for chunk, table in _in_order(plan, _arrow_table, chunk_rows, threads):
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema, compression="zstd")
            elif table.schema != writer.schema:
                table = table.cast(writer.schema)
            writer.write_table(table)
            rows += len(chunk)
            if progress is not None:
                progress(chunk)
    finally:
        if writer is not None:
            writer.close()
    return rows


# --------------------------------------------------------------------------------
# What `--plot` draws, gathered while the rows stream past
# --------------------------------------------------------------------------------
@record(frozen=False)
class Series:
    """One line of the sweep plot: KV cache per device against x for one variant."""

    kv_heads: int
    attention: str  # MHA / GQA / MQA / MLA
    fixed: int  # the batch (x = seq_len) or the seq_len (x = batch) of this line
    x: np.ndarray
    y: np.ndarray  # kv_cache_bytes_per_device
    free_bytes: int | None  # device memory after this variant's weights, per device


class PlotSelection:
    """Picks the rows `--plot` shows and keeps only those (a few thousand points).

    The first kv_dtype and tp of the sweep; x is seq_len (or batch when a single
    seq_len is swept); one line per K/V-head count, at the largest batch swept
    (against batch: at the first seq_len).
    """

    def __init__(self, plan: SweepPlan):
        self.plan = plan
        first = plan.combos[0]
        self.kv_dtype, self.tp = first.kv_dtype.name, first.tp
        self.x = "seq_len" if plan.seq_len.count > 1 or plan.batch.count == 1 else "batch"
        if self.x == "seq_len":
            self.lines = [plan.batch.max]
        else:
            self.lines = [plan.seq_len.first]
        self._parts: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        self._combos: dict[int, Combo] = {}

    def add(self, chunk: Chunk) -> None:
        c = chunk.combo
        if c.kv_dtype.name != self.kv_dtype or c.tp != self.tp:
            return
        self._combos[c.kv_heads] = c
        y = chunk.values["kv_cache_bytes_per_device"]
        if self.x == "seq_len":
            for b in self.lines:
                mask = chunk.batch == b
                if mask.any():
                    part = (chunk.seq_len[mask], y[mask])
                    self._parts.setdefault((c.kv_heads, b), []).append(part)
        else:
            self._parts.setdefault((c.kv_heads, self.lines[0]), []).append((chunk.batch, y))

    def series(self) -> list[Series]:
        out = []
        for (g, fixed), parts in self._parts.items():
            x = np.concatenate([p[0] for p in parts])
            y = np.concatenate([np.asarray(p[1], dtype=np.float64) for p in parts])
            order = np.argsort(x, kind="stable")
            c = self._combos[g]
            out.append(Series(kv_heads=g, attention=c.constants["attention"], fixed=fixed,
                              x=x[order], y=y[order],
                              free_bytes=c.free_bytes if self.plan.hardware is not None else None))
        return sorted(out, key=lambda s: (-s.kv_heads, s.fixed))

    @property
    def title(self) -> str:
        p = self.plan
        other = "batch" if self.x == "seq_len" else "seq_len"
        fixed = ", ".join(f"{v:,}" for v in self.lines)
        against = "context" if self.x == "seq_len" else "batch"
        parts = [f"{base_name(p.spec.name)}: KV cache per device vs {against}",
                 f"{other} {fixed}, KV {self.kv_dtype}, weights {p.weight_dtype}, tp {self.tp}"]
        if p.hardware is not None:
            parts[-1] += f", {p.hardware.name}"
        return "\n".join(parts)
