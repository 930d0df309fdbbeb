"""The sweep's rows, computed a chunk at a time on numpy arrays.

Each chunk is rows [start, stop) of one combination's seq_len x batch grid. Its
varying columns come from `row_columns`, which calls the formulas `estimate()` calls
(kvcalc.formulas, kvcalc.layers) on whole arrays: they take Python ints or numpy
arrays alike, so every layer kind a model has is swept with the same arithmetic as
one estimate.

Integers are int64 while they provably fit (everything grows with seq_len and
batch, so the largest row of a block bounds the block); rows that could pass
2^63 - 1 are computed with Python ints instead, so bytes and FLOPs stay exact.
Floats are float64(a) / float64(b): identical to Python's int / int (what
`estimate` does) when both are below 2^53, otherwise within an ulp or two.

Chunks are computed in a pool of threads (numpy releases the GIL for nearly all
of the work) and handed on in order, a bounded number in flight.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import field, replace
from typing import Callable, Iterator

import numpy as np

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_BATCH
from kvcalc.serving.room import Room, serves
from kvcalc.serving.vllm.verdict import rooms
from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_cache
from kvcalc.formulas.step import StoredWeights, decode_step
from kvcalc.speed.latency import engine_decode_terms, engine_tpot_s
from kvcalc.speed.roofline import compute_dtype_for
from kvcalc.spec import Hardware, ModelSpec
from kvcalc.sweep.grammar import INT64_MAX
from kvcalc.sweep.plan import FLOAT_COLUMNS, Combo, SweepPlan, plan_sweep
from kvcalc.workload import Workload

CHUNK_ROWS = 1 << 15  # rows computed and formatted together
_SAFE_FLOAT = float(1 << 62)  # float64 magnitude test with margin for its rounding
# Columns whose magnitude bounds every intermediate of the arithmetic (all sums of
# non-negative terms): if these fit in int64, so does everything else.
_BOUNDING = ("kv_cache_bytes_full", "decode_flops", "decode_bytes")


def row_columns(spec: ModelSpec, workload: Workload, *, hardware: Hardware | None = None,
                free_for_kv_bytes: int | None = None, stored: StoredWeights | None = None,
                engine=None, family: str = "", room: Room | None = None) -> dict:
    """The row columns that vary with seq_len and batch, for a workload whose seq_len and
    batch are equal-shape numpy arrays (a chunk of rows; Python ints work too): the
    figures Estimate.as_row() reads, computed by the same formulas on whole arrays.

    With hardware: the decode step's time bound on one of `tp` devices (decode_roofline's
    arithmetic), `roofline_bound` True where memory binds, and whether the batch's cache
    fits in `free_for_kv_bytes` (the floor: the fit's free memory for this model, dtype
    and tp); `room`, a Room whose fields are arrays of each row's length's (kvcalc.serving.
    room), gives the verdict by the rule `estimate` applies; with `engine` too, the time per output token on it (latency.engine_tpot_s, the
    formula `estimate --engine` uses).
    """
    w = workload
    seq_len, batch = w.seq_len, w.batch
    compute_dtype = compute_dtype_for(w.weight_dtype)
    cache = kv_cache(spec, seq_len, batch, w.kv_dtype, w.tp, w.kv_scale_bytes, w.encoder_seq_len)
    d = decode_step(spec, seq_len, batch, w.weight_dtype, w.kv_dtype, compute_dtype, w.tp,
                    w.kv_scale_bytes, w.encoder_seq_len, prefill=False, stored=stored)
    out = {
        "kv_cache_bytes": cache.bytes,
        "kv_cache_bytes_full": cache.bytes_full,
        "kv_cache_bytes_per_device": cache.bytes_per_device,
        "decode_flops": d.flops,
        "decode_bytes": d.bytes,
        "arithmetic_intensity": d.flops / d.bytes,
        "attention_arithmetic_intensity": d.attention_flops / d.attention_bytes,
    }
    if hardware is not None:
        memory_s = d.per_device_bytes / hardware.memory_bandwidth_bytes_per_s
        compute_s = d.per_device_flops / hardware.peak_flops(compute_dtype)
        memory_bound = memory_s >= compute_s
        time_s = _num.where(memory_bound, memory_s, compute_s)
        kv = cache.bytes_per_device
        out.update({
            "roofline_s": time_s,
            "roofline_bound": memory_bound,
            "tokens_per_s": batch / time_s,
            "fits": serves(room, batch),
            "floor_fits": (kv >= 0) & (kv <= free_for_kv_bytes),
        })
        if engine is not None:
            out["tpot_s"] = engine_tpot_s(engine_decode_terms(
                engine, family, hardware, d, spec.layers, w.tp, compute_dtype))
    return out



_EXACT_IN_INT64 = (1 << 62) // MAX_BATCH  # times a batch (<= MAX_BATCH) stays in int64

def _varying_columns(c: Combo, S, B, hardware: bool) -> dict:
    """The varying columns for arrays S (seq_len) and B (batch) of equal shape.

    Works on int64 arrays (fast), object arrays of Python ints (exact, any size)
    and float64 arrays (magnitudes only, for the overflow test): row_columns and the
    formulas under it take any of them.
    """
    return row_columns(c.spec, replace(c.workload, seq_len=S, batch=B),
                       hardware=c.hardware if hardware else None,
                       free_for_kv_bytes=c.free_bytes, stored=c.stored,
                       engine=c.engine if hardware else None, family=c.family,
                       room=_rooms(c, S) if hardware else None)


def _rooms(c: Combo, S) -> Room:
    """The engine's Room at each row's length, as one Room of arrays (the engine's counts
    kept on the combination for the chunks after)."""
    lengths, where = np.unique(S, return_inverse=True)
    if c.memory_engine is not None and c.memory_engine.name != "vllm":
        r = _engine_rooms(c, lengths.tolist())
    else:
        r = rooms(c.spec, c.hardware, c.serving, lengths.tolist(), c.workload.kv_scale_bytes,
                  counts=c.counts)
    # int64 where a batch (<= MAX_BATCH) x blocks cannot overflow: object arrays of
    # Python ints, exact at any size, make serves() several times slower.
    small = max(max(r.num_blocks), max(r.blocks_per_request), max(r.max_num_seqs)) \
        < _EXACT_IN_INT64
    whole = np.int64 if small else object

    def column(v: np.ndarray) -> np.ndarray:
        return v.astype(whole)[where]

    return Room(max_model_len=S, starts=r.starts[where], num_blocks=column(r.num_blocks),
                blocks_per_request=column(r.blocks_per_request),
                max_num_seqs=column(r.max_num_seqs), request_bytes=0, block_bytes=0,
                kv_cache_bytes=0, refusal="")


def _compute(c: Combo, S: np.ndarray, B: np.ndarray, hardware: bool) -> dict:
    """_varying_columns on int64, with the rows that could overflow recomputed in
    Python ints."""
    corner = _varying_columns(c, np.array([int(S.max())], dtype=object),
                              np.array([int(B.max())], dtype=object), False)
    if max(int(corner[k][0]) for k in _BOUNDING) <= INT64_MAX:
        return _varying_columns(c, S, B, hardware)
    approx = _varying_columns(c, S.astype(np.float64), B.astype(np.float64), False)
    big = np.zeros(len(S), dtype=bool)
    for k in _BOUNDING:
        big |= approx[k] >= _SAFE_FLOAT
    exact = _varying_columns(c, S[big].astype(object), B[big].astype(object), hardware)
    fast = _varying_columns(c, S[~big], B[~big], hardware) if (~big).any() else None
    out = {}
    for k, v in exact.items():
        col = np.empty(len(S), dtype=object if k not in FLOAT_COLUMNS else np.float64)
        if k in ("roofline_bound", "fits", "floor_fits"):
            col = np.empty(len(S), dtype=bool)
        col[big] = v.astype(col.dtype)
        if fast is not None:
            col[~big] = fast[k]
        out[k] = col
    return out


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


def _threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def in_order(plan: SweepPlan, work: Callable[[Chunk], object], chunk_rows: int,
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


def iter_rows(plan: SweepPlan) -> Iterator[dict]:
    """Every row as a dict of Python values (slow; for tests and small sweeps)."""
    for chunk in chunks(plan):
        yield from chunk.rows()


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


def _engine_rooms(c: Combo, lengths: list[int]) -> Room:
    """Another engine's Room at each length (kvcalc.serving's count with that context,
    kept on the combination for the chunks after), as one Room of object arrays."""
    from kvcalc.serving import count
    from kvcalc.serving.flags import engine_flags

    out = []
    for n in lengths:
        key = ("engine", n)
        if key not in c.counts:
            flags = engine_flags(c.memory_engine, replace(c.serving, max_model_len=n),
                                 kv_scale_bytes=c.workload.kv_scale_bytes)
            c.counts[key] = count(c.spec, c.hardware, flags).room()
        out.append(c.counts[key])

    def column(name: str) -> np.ndarray:
        v = np.empty(len(out), dtype=object)
        v[:] = [getattr(r, name) for r in out]
        return v

    return Room(max_model_len=np.array(lengths, dtype=object),
                starts=column("starts").astype(bool), num_blocks=column("num_blocks"),
                blocks_per_request=column("blocks_per_request"),
                max_num_seqs=column("max_num_seqs"), request_bytes=column("request_bytes"),
                block_bytes=column("block_bytes"), kv_cache_bytes=column("kv_cache_bytes"),
                refusal="")
