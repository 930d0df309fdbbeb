"""The memory guard of a `kvcalc measure` run: what each (step, kv_heads) group will
hold at its peak, planned before anything big is allocated, the default sizes halved
until the largest group fits, and the refusal (with a smaller setting that fits) when
nothing does.

A group's plan also says how the timing defeats the last-level cache: distinct caches
rotated over, or a flush before each repetition (l2_plan).
"""

from __future__ import annotations

import math
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.config import DEFAULTS, MeasureConfig
from kvcalc.measure.predict import Block, StepPrediction, block, predict
from kvcalc.ground.units import human_bytes
from kvcalc.ground.dtypes import dtype as _dtype

MAX_SLOTS = 64  # rotation beyond this: flush instead (the streamed ceilings: terms.STREAM_MAX_COPIES)
# Rotate over at least 8x the last-level cache: at 4x a CPU's victim-style LLC still served
# up to ~25% of a repetition (measured: 27% faster streams at 4x than at 8x on this EPYC).
L2_MULTIPLE = 8
# A flush reads one and a half times the last-level cache (enough to evict it under
# any replacement policy seen in practice), not L2_MULTIPLE times: the flush is for
# caches too small to rotate, and 4x a big server LLC would be gigabytes.
FLUSH_NUM, FLUSH_DEN = terms_mod.FLUSH_NUM, terms_mod.FLUSH_DEN
LOGIT_BYTES = 16  # per logit, worst case: scores, fp32 copy, softmax, cast back
GRAPH_POOL_SLACK_BYTES = 22 * 2**20  # per captured graph: one small and one large segment
PROBE_SEQ_LEN = 64  # tokens in the SDPA backend probes


def probe_bytes(heads: int, kv_heads: int, head_dim: int, seq_len: int, dtype: str) -> int:
    """Upper bound on an SDPA probe's memory: q, K, V, output, and the math backend's
    fp32 copies with K/V repeated per query head, and its logits."""
    e = _dtype(dtype).nbytes(1)
    tensors = e * head_dim * (2 * heads + 2 * kv_heads * seq_len)
    math_fallback = 4 * head_dim * (2 * heads + 2 * heads * seq_len) + LOGIT_BYTES * heads * seq_len
    return tensors + math_fallback


# --------------------------------------------------------------------------------
# Planning (no big allocations)
# --------------------------------------------------------------------------------
@record(frozen=False)
class Group:
    """One (step, kv_heads) pair: its buffers are allocated together and freed after."""

    step: str
    kv_heads: int
    block: Block
    pred: StepPrediction
    impls: list[str]
    slots: int
    flush_bytes: int
    l2_regime: str
    needed_bytes: int
    needed_breakdown: dict[str, int] = field(default_factory=dict)
    shape_ceilings: dict = field(default_factory=dict)  # impl -> terms.ShapeCeilings
    stream_bytes: int | None = None  # streamed ceilings' size (None: terms.stream_bytes)
    streamed: dict = field(default_factory=dict)  # shared by a run's groups: measured once


def _times(x: float) -> str:
    """'4.0x', or '0.031x' for small ratios (never '0.0x')."""
    return f"{x:.1f}x" if x >= 0.1 else f"{x:.2g}x"


def l2_plan(slot_bytes: int, cache_bytes: int, cache_name: str, mode: str,
            what: str) -> tuple[int, int, str]:
    """(slots, flush_bytes, description) for defeating the last-level cache."""
    ratio = slot_bytes / cache_bytes
    if mode == "none":
        if slot_bytes <= cache_bytes:
            return 1, 0, f"{what} fits in {cache_name} (not flushed)"
        return 1, 0, f"single {what}, {ratio:.1f}x {cache_name}, not flushed"
    need = max(1, math.ceil(L2_MULTIPLE * cache_bytes / slot_bytes))
    if mode == "rotate" or (mode == "auto" and need <= MAX_SLOTS):
        n = min(need, MAX_SLOTS)
        if n == 1:
            return 1, 0, f"single {what}, {_times(ratio)} {cache_name}"
        total = n * ratio
        warn = "" if total >= L2_MULTIPLE else f" (capped at {MAX_SLOTS}; partly {cache_name}-resident)"
        plural = what + ("s" if not what.endswith("s") else "")
        return n, 0, f"rotated {n} {plural}, {_times(total)} {cache_name}{warn}"
    flush = terms_mod.flush_bytes(cache_bytes)  # checked by the memory guard with the rest
    return 1, flush, f"{cache_name} flushed before each repetition ({human_bytes(flush)} read)"


def attention_workspace(name: str, kv_bytes: int, logits: int, g: int, e: int,
                        sdpa_copies_kv: bool) -> int:
    """Temporaries of one attention call of `name` over `kv_bytes` of K/V with `logits`
    bytes of scores (LOGIT_BYTES per logit) and group size `g` (an upper bound)."""
    if name == "sdpa-math" or (name == "sdpa" and sdpa_copies_kv):
        # The math backend upcasts half-precision q, K, V to fp32, repeats K/V per query
        # head and makes the transposed K contiguous: up to two expanded copies live at
        # once (about 1.5g + 1 caches measured in fp32 on a CPU; 2g + 1 is the bound).
        upcast = 4 // e if e < 4 else 1
        return logits + (2 * g + 1) * kv_bytes * upcast
    if name == "repeat":
        return logits + g * kv_bytes  # K and V repeated per query head
    return logits


def shape_ceilings_need(step: str, blk: Block, batch: int, seq_len: int, dtype: str,
                        impl_names: list[str], sdpa_copies_kv: bool, cache_bytes: int,
                        stream: int) -> int:
    """What the ceilings at the step's shapes (terms.shape_ceilings, refresh_streams) hold at
    once, as allocated: the K/V stream's heads with its queries, outputs and each
    implementation's temporaries (with a tiny head_dim the logits outweigh K/V); the weight
    stream's copies of the layer, counted with their per-tensor overhead, and its flush."""
    e = _dtype(dtype).nbytes(1)
    n = terms_mod.kv_stream_heads(blk.head_dim, seq_len, e, stream)
    kv = 2 * terms_mod.tensor_bytes(n * seq_len * blk.head_dim * e)
    q_out = 2 * terms_mod.tensor_bytes(n * blk.head_dim * e)
    kv_need = kv + q_out + max(attention_workspace(name, kv, LOGIT_BYTES * n * seq_len, 1, e,
                                                   sdpa_copies_kv) for name in impl_names)
    w_need = 0
    if step == "layer":
        w_need = terms_mod.weight_stream_need_bytes(e, batch, blk.heads, blk.kv_heads,
                                                    blk.head_dim, blk.d_model, stream,
                                                    cache_bytes)
    return terms_mod.shape_workspace_bytes(cache_bytes, max(kv_need, w_need))


def needed_bytes(pred: StepPrediction, blk: Block, batch: int, seq_len: int,
                 dtype: str, impl_names: list[str], slots: int, flush_bytes: int,
                 cuda_graphs: bool, sdpa_copies_kv: bool) -> dict[str, int]:
    """What a group holds at its peak, by part (bytes; an upper bound)."""
    e = _dtype(dtype).nbytes(1)
    g = blk.heads // blk.kv_heads
    small = e * batch * (blk.heads * blk.head_dim + blk.d_model)  # q or x
    logits = LOGIT_BYTES * batch * blk.heads * seq_len
    ws = max(attention_workspace(n, pred.kv_cache_bytes, logits, g, e, sdpa_copies_kv)
             for n in impl_names)
    if cuda_graphs:
        # Each captured graph keeps its own memory pool, rounded up to whole allocator
        # segments (2 MiB small, 20 MiB large).
        ws = slots * (ws + GRAPH_POOL_SLACK_BYTES)
    # The float64 reference: one sequence's K and V of one head at a time (two for
    # the layer step, which copies a whole sequence), its logits, and the output.
    per_seq_cache = pred.kv_cache_bytes // batch
    reference = (2 * seq_len * blk.head_dim * 8 + 2 * g * seq_len * 8
                 + 8 * batch * blk.heads * blk.head_dim)
    if pred.step == "layer":
        reference += (8 // e) * (per_seq_cache + pred.weight_bytes) + 8 * batch * (
            (blk.heads + 2 * blk.kv_heads) * blk.head_dim + blk.d_model)
    return {
        "caches": slots * pred.kv_cache_bytes,
        "weights": slots * pred.weight_bytes,
        "inputs": slots * small,
        # each slot's tensors (K, V, q or x, two weights): alignment and per-tensor objects
        "tensor_overhead": slots * 5 * terms_mod.tensor_bytes(0),
        "flush": flush_bytes,
        "workspace": ws,
        "reference": reference,
    }


def plan_groups(config: MeasureConfig, seq_len: int, batch: int, dtype: str, impl_names: list[str],
                device_meta: dict, sdpa_copies: dict[int, bool],
                stream: int | None = None) -> list[Group]:
    groups = []
    cache_name = device_meta["cache_name"]
    for step in config.steps():
        for kv in config.kv_variants():
            blk = block(config.heads, kv, config.head_dim, config.d_model)
            pred = predict(step, blk, batch, seq_len, dtype)
            slot_bytes = pred.kv_cache_bytes + pred.weight_bytes
            slots, flush, regime = l2_plan(slot_bytes, device_meta["cache_bytes"], cache_name,
                                           config.l2, "cache" if step == "attention" else "layer")
            parts = needed_bytes(pred, blk, batch, seq_len, dtype, impl_names, slots, flush,
                                 config.cuda_graphs, sdpa_copies.get(kv, False))
            parts["shape_ceilings"] = shape_ceilings_need(
                step, blk, batch, seq_len, dtype, impl_names, sdpa_copies.get(kv, False),
                device_meta["cache_bytes"], stream or terms_mod.stream_bytes(
                    device_meta["cache_bytes"], 8 * device_meta["cache_bytes"] if flush
                    else slots * slot_bytes))
            groups.append(Group(step, kv, blk, pred, impl_names, slots, flush, regime,
                                sum(parts.values()), parts))
    return groups


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


def default_batch(config: MeasureConfig, seq_len: int, dtype: str, device_type: str) -> int:
    """Smallest power of two whose cache (given kv_heads) reaches the device's target size."""
    d = DEFAULTS[device_type]
    attn = block(config.heads, config.kv_heads, config.head_dim, config.d_model).attention
    per_seq = seq_len * attn.token_bytes(_dtype(dtype))
    want = max(1, math.ceil(d.target_cache_bytes / per_seq))
    b = 1
    while b < want and b < d.max_default_batch:
        b *= 2
    return b



# --------------------------------------------------------------------------------
# Fitting the sizes in the memory there is
# --------------------------------------------------------------------------------
@record
class MemoryRoom:
    """What a run may hold: `usable` of the `free` bytes on a device of `kind`, whose
    last-level cache `meta` describes (ceilings.device_info); `buffer`: the ceiling
    buffers' size when a test shrinks them (None: sized from the cache)."""

    free: int
    usable: int
    kind: str
    meta: dict
    buffer: int | None = None


def limit_words(kind: str) -> str:
    """Words naming a limit that bounds this process's memory below the free RAM, or ""."""
    return ceil_mod.cpu_memory_room()[1] if kind == "cpu" else ""


def fit_sizes(config: MeasureConfig, dtype: str, room: MemoryRoom, impl_names: list[str],
              copies: dict[int, bool], seq_len: int, batch: int) -> tuple[int, int]:
    """(seq_len, batch) that fit, defaults halved as needed; or refuse. `copies`: whether
    the unpinned SDPA call copies K/V, by kv_heads (the probes' finding)."""
    def peak(s: int, x: int) -> int:
        gs = plan_groups(config, s, x, dtype, impl_names, room.meta, copies, room.buffer)
        return max(g.needed_bytes for g in gs)

    sl, b = seq_len, batch
    need = peak(sl, b)
    while need > room.usable and config.batch is None and b > 1:
        b //= 2
        need = peak(sl, b)
    while need > room.usable and config.seq_len is None and sl > 128:
        sl //= 2
        need = peak(sl, b)
    if need > room.usable:
        raise ParameterError(_refusal(need, room.free, room.usable, room.kind, sl, b, peak,
                                      config, lambda: _fixed_need(config, dtype, room,
                                                                  impl_names, copies, sl, b)),
                             "seq_len", "batch", "d_model")
    return sl, b


def _fixed_need(config: MeasureConfig, dtype: str, room: MemoryRoom, impl_names: list[str],
                copies: dict[int, bool], s: int, x: int) -> int:
    """What no smaller --seq-len, --batch or --d-model shrinks: the K/V stream at its
    least (8x the LLC) and the flush of a cache too small to rotate."""
    cache_bytes = room.meta["cache_bytes"]
    stream = room.buffer or terms_mod.stream_bytes(cache_bytes)
    return max(shape_ceilings_need("attention", g.block, x, s, dtype, impl_names,
                                   copies.get(g.kv_heads, False), cache_bytes, stream)
               + g.needed_breakdown["flush"]
               for g in plan_groups(config, s, x, dtype, impl_names, room.meta, copies,
                                    room.buffer))


def ceiling_need(room: MemoryRoom, dtype: str) -> int:
    """The bandwidth ceilings' buffers in bytes; refused when they do not fit."""
    ceiling_ws = (ceil_mod.ceiling_workspace_bytes(room.kind, dtype) if room.buffer is None
                  else 2 * room.buffer)
    if ceiling_ws > room.usable:
        words = limit_words(room.kind)
        raise KvcalcError(f"the bandwidth ceilings need {human_bytes(ceiling_ws)} but only "
                          f"{human_bytes(room.usable)} of {room.kind} memory is usable"
                          + (f" under {words}" if words else ""))
    return ceiling_ws


def _refusal(need: int, free: int, usable: int, kind: str, seq_len: int, batch: int,
             peak, config: MeasureConfig, fixed_need=None) -> str:
    """Why the sizes do not fit, a ParameterError's template: {seq_len}, {batch} and
    {d_model} name the parameters."""
    words = limit_words(kind)
    msg = literal(f"needs {human_bytes(need)} but {human_bytes(free)} is free on {kind} "
                  + (f"under {words} " if words else "")
                  + f"({config.memory_fraction:.0%} usable: {human_bytes(usable)})")
    tries = []
    sl = _largest_fitting(lambda s: peak(s, batch) <= usable, seq_len)
    if sl:
        tries.append(f"{{seq_len}} {sl}")
    b = _largest_fitting(lambda x: peak(seq_len, x) <= usable, batch)
    if b:
        tries.append(f"{{batch}} {b}")
    if tries:
        return f"{msg}; try {' or '.join(tries)}"
    if fixed_need is not None:
        # What smaller sizes do not shrink: the streamed ceilings read 8x the LLC at any
        # shape, and a cache too small to rotate is flushed with 1.5x the LLC.
        fixed = fixed_need()
        if fixed > usable:
            return (f"{msg}; smaller sizes do not fit either: the bandwidth ceilings at the "
                    f"step's shapes and the cache flush alone need {human_bytes(fixed)} (they "
                    f"stream at least 8x the {_cache_name(kind)}, whatever {{seq_len}} and "
                    f"{{batch}}); free some memory" + (" or raise the limit" if words else ""))
    if config.step in ("layer", "both"):
        return (f"{msg}; even {{seq_len}} 1 {{batch}} 1 does not fit: the layer step holds its "
                f"weights (d_model {config.d_model or config.heads * config.head_dim:,}); try a "
                f"smaller {{d_model}}, fewer heads or a smaller head_dim")
    return (f"{msg}; even {{seq_len}} 1 {{batch}} 1 does not fit: try fewer heads or a smaller "
            "head_dim")


def _cache_name(kind: str) -> str:
    return "L2" if kind == "cuda" else "last-level cache"


def _largest_fitting(fits, upper: int) -> int:
    """Largest power of two below `upper` for which fits() holds, or 0."""
    n = _pow2_floor(upper)
    if n == upper:
        n //= 2
    while n >= 1:
        if fits(n):
            return n
        n //= 2
    return 0
