"""Ceilings at the step's own shapes, per-call overhead, and what else ran on the host.

A decode step's matmuls are skinny: (group x head_dim) @ (head_dim x seq_len) per K/V
head, (batch x d_model) @ (d_model x out) for the projections. The square-matmul
ceiling says little about them, so each is timed at its own shape with operands small
enough to stay in the last-level cache: FLOPs over that time is the fastest this
shape computes, the compute term of the prediction. The per-call overhead is the
same call on a tiny input. Host load is sampled from /proc around each timed loop,
so a row timed while other processes ran can be told from a model error.
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

from kvcalc.ground.record import record
from kvcalc.measure.timing import time_calls, time_calls_within

SHAPE_FRACTION = 4  # operands of a shape ceiling: at most LLC / 4, so they stay resident
SHAPE_ITERS = (3, 20)  # (warm-up, repetitions)
# A streamed ceiling's repetitions stop at about this much time (never under
# STREAM_MIN_ITERS; their median is the figure). With tiny heads (head_dim 8, 16 tokens:
# ~10^5 heads per stream) a K/V call takes ~65 ms, and 20 of them, over 3 rounds and two
# implementations, made a toy `measure` take 20 s. At the campaign's shapes a K/V call
# takes ~25 ms (about 20 run) and a weight call 50-70 ms (7-10 run, in each of 3 rounds).
STREAM_BUDGET_S = 0.5
STREAM_MIN_ITERS = 5
# And one call of the K/V stream at most about this long. Sized by bytes alone, the stream
# holds 8x the LLC in heads of (seq_len, head_dim): with head_dim 4 and one token that was
# 8M heads, whose call took 1-8 s in fp32 on this project's 2-core VM (SDPA's per-head cost,
# not its bytes) and minutes in fp16, which that CPU emulates. When a call would take longer
# (kv_stream_plan times growing parts of the stream), the stream is cut to the heads a call
# of about half this budget reads, and the last-level cache is flushed before each
# repetition instead (as the timed step itself is, when its cache is too small to rotate):
# the heads are still read from memory. The campaign's shapes (a call of ~25 ms) stay whole.
STREAM_CALL_BUDGET_S = 0.1
PILOT_START_HEADS = 16  # kv_stream_plan's first try
# A cut stream reads at least this many heads (or the full stream, when fewer): on a host
# other jobs kept busy (load 14 on 2 cores), a call of 16 heads took 16-24 ms, which read
# as long enough to stop at, and a 16-head stream measures nothing but the call's cost.
CUT_MIN_HEADS = 4096
CUT_SLOPE_FRACTION = 4  # the cut stream is also read at 1/4 of its heads: see kv_stream_bytes_per_s
# Calls at the step's own shapes (operands in the LLC) whose best is taken: their
# repetitions stop at about this much time too (never under SHAPE_MIN_ITERS).
SHAPE_BUDGET_S = 0.5
SHAPE_MIN_ITERS = 3
OVERHEAD_HEAD_DIM = 8  # the tiny call that measures per-call overhead
OVERHEAD_SEQ_LEN = 16
LOADED_CORES = 0.25  # other processes (or the hypervisor's steal) above this: a loaded host


STREAM_MIN_BYTES = 64 * 2**20  # a streamed ceiling reads at least this, and 8x the LLC
# The weight stream rotates over at most this many copies of the layer (as the timed step,
# guard.MAX_SLOTS); when more would be needed to read the stream's bytes, it rotates over
# these and reads FLUSH_NUM/FLUSH_DEN of the last-level cache before each repetition instead.
# (Counted by bytes alone, a 256-byte layer, heads 1 x head_dim 4, needed 2^20 copies of a
# 256 MiB stream: each copy's five tensors and Python objects outweighed its bytes, and
# building them ran over 5 minutes and 8 GB.)
STREAM_MAX_COPIES = 64
# A flush reads one and a half times the last-level cache (enough to evict it under any
# replacement policy seen in practice); the timed step's flush (guard.l2_plan) too.
FLUSH_NUM, FLUSH_DEN = 3, 2
# Per tensor beyond its bytes: the allocator's 64-byte alignment and header, the
# TensorImpl/StorageImpl and the Python object (an upper bound, for the memory guard).
TENSOR_OVERHEAD_BYTES = 1024
ALIGN_BYTES = 64


def flush_bytes(cache_bytes: int) -> int:
    """Bytes a flush of the last-level cache reads."""
    return -(-FLUSH_NUM * cache_bytes // FLUSH_DEN)


def tensor_bytes(nbytes: int) -> int:
    """What a tensor of `nbytes` really takes (alignment and per-tensor overhead)."""
    return -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES + TENSOR_OVERHEAD_BYTES


def weight_stream_copies(weight_bytes: int, total_bytes: int) -> tuple[int, bool]:
    """(copies of the layer the weight stream rotates over, whether it also flushes):
    enough copies to read `total_bytes` of weights, at most STREAM_MAX_COPIES."""
    need = max(1, -(-total_bytes // max(1, weight_bytes)))
    return min(need, STREAM_MAX_COPIES), need > STREAM_MAX_COPIES


def layer_copy_bytes(e: int, batch: int, seq_len: int, heads: int, kv_heads: int,
                     head_dim: int, d_model: int) -> int:
    """Memory one layer slot (impls.make_slot) really takes: K, V, x and the two weights."""
    kv = tensor_bytes(e * batch * kv_heads * seq_len * head_dim)
    return (2 * kv + tensor_bytes(e * batch * d_model)
            + tensor_bytes(e * (heads + 2 * kv_heads) * head_dim * d_model)
            + tensor_bytes(e * d_model * heads * head_dim))


def kv_stream_heads(head_dim: int, seq_len: int, e: int, total_bytes: int) -> int:
    """K/V heads of (seq_len, head_dim) the K/V stream reads: enough for total_bytes."""
    return max(1, -(-total_bytes // (2 * seq_len * head_dim * e)))


def layer_weight_bytes(e: int, heads: int, kv_heads: int, head_dim: int, d_model: int) -> int:
    """The layer step's weights: the fused qkv projection and the output projection."""
    return e * ((heads + 2 * kv_heads) * head_dim * d_model + d_model * heads * head_dim)


def weight_stream_need_bytes(e: int, batch: int, heads: int, kv_heads: int, head_dim: int,
                             d_model: int, total_bytes: int, cache_bytes: int) -> int:
    """Upper bound of what weight_stream_bytes_per_s holds at once (for the memory guard):
    its copies, the flush buffer when it flushes, and one call's temporaries."""
    weights = layer_weight_bytes(e, heads, kv_heads, head_dim, d_model)
    copies, flushed = weight_stream_copies(weights, total_bytes)
    each = layer_copy_bytes(e, batch, WEIGHT_PROBE_SEQ_LEN, heads, kv_heads, head_dim, d_model)
    call = 16 * batch * (heads * WEIGHT_PROBE_SEQ_LEN + (heads + 2 * kv_heads) * head_dim + d_model)
    return copies * each + (tensor_bytes(flush_bytes(cache_bytes)) if flushed else 0) + call


@record
class ShapeCeilings:
    attention_flops_per_s: float  # the step's attention at its (group, head_dim, seq_len)
    projection_flops_per_s: float | None  # (batch x d_model) @ (d_model x out), layer step
    overhead_s: float  # one call on a tiny input
    method: str
    # Bandwidth with the step's own access pattern, streamed from memory: the
    # implementation reading K/V heads of this (head_dim, seq_len) with one query row
    # per K/V head (no reuse: the least compute per byte); and the layer step itself
    # over a few-token cache (its weights' stream: the projections' skinny GEMMs).
    kv_read_bytes_per_s: float = 0.0
    weight_read_bytes_per_s: float | None = None
    # Whether the K/V stream was cut to STREAM_CALL_BUDGET_S (kv_stream_plan): fewer heads,
    # the LLC flushed before each repetition instead.
    kv_stream_cut: bool = False


def stream_bytes(cache_bytes: int, working_set: int = 0) -> int:
    """Bytes a streamed ceiling reads per call: the step's own working set (what it rotates
    over, so the ceiling meets the same share of cache hits), at least 8x the LLC."""
    return max(8 * cache_bytes, STREAM_MIN_BYTES, working_set)


def refresh_streams(shape: ShapeCeilings, step: str, attn, device, tdtype, heads: int,
                    kv_heads: int, head_dim: int, d_model: int, seq_len: int, batch: int,
                    stream: int, streamed: dict, lockstep=None,
                    cache_bytes: int | None = None) -> ShapeCeilings:
    """`shape` with its streamed bandwidths measured again now (the FLOP/s and overhead
    kept); `lockstep` and `cache_bytes` as for shape_ceilings."""
    from dataclasses import replace

    kv, n_kv = kv_stream_bytes_per_s(attn, device, tdtype, head_dim, seq_len, stream, lockstep,
                                     cache_bytes)
    cut = n_kv < kv_stream_heads(head_dim, seq_len, torch.empty((), dtype=tdtype).element_size(),
                                 stream)
    w = None
    if step == "layer":
        w, _ = weight_stream_bytes_per_s(attn, device, tdtype, batch, heads, kv_heads, head_dim,
                                         d_model, stream, shape.overhead_s, lockstep, cache_bytes)
    return replace(shape, kv_read_bytes_per_s=kv, weight_read_bytes_per_s=w, kv_stream_cut=cut)


def median_streams(shapes: list[ShapeCeilings]) -> ShapeCeilings:
    """One ShapeCeilings whose streamed read rates are the median of several rounds'."""
    import statistics
    from dataclasses import replace

    def med(values):
        values = [v for v in values if v]
        return statistics.median(values) if values else None

    return replace(shapes[0],
                   kv_read_bytes_per_s=med([s.kv_read_bytes_per_s for s in shapes]) or 0.0,
                   weight_read_bytes_per_s=med([s.weight_read_bytes_per_s for s in shapes]),
                   kv_stream_cut=any(s.kv_stream_cut for s in shapes))


def shape_workspace_bytes(cache_bytes: int, stream: int | None = None) -> int:
    """Upper bound of what shape_ceilings allocates at once (for the memory guard)."""
    return max(3 * (cache_bytes // SHAPE_FRACTION), stream or stream_bytes(cache_bytes)) + 2**22


def _median(fns, device, lockstep=None, flush=None) -> float:
    """A streamed ceiling: the median, like the read ceiling and the steps it predicts.
    `lockstep` (tensor parallelism: a barrier) runs, untimed, before each repetition; then
    every rank makes the same number of calls, so the count is fixed, never budgeted.
    `flush` (evicting the last-level cache) runs, untimed, before each repetition too."""
    fns = fns if isinstance(fns, (list, tuple)) else [fns]
    warmup, iters = SHAPE_ITERS
    before = lockstep
    if flush is not None:
        def before():
            flush()
            if lockstep is not None:
                lockstep()
    if lockstep is None:
        first = time_calls(fns, device=device, warmup=1, iters=1, flush=before).median_s
        iters = max(STREAM_MIN_ITERS, min(iters, int(STREAM_BUDGET_S / max(first, 1e-9))))
        warmup = max(0, warmup - 2)  # the two calls above warmed it
    return time_calls(fns, device=device, warmup=warmup, iters=iters, flush=before).median_s


def _best(fn, device) -> float:
    """The fastest of SHAPE_ITERS repetitions: a ceiling, like STREAM's best (and robust to a
    neighbour's burst, which a tiny call's median is not). Fewer (at least SHAPE_MIN_ITERS)
    when they would take over SHAPE_BUDGET_S: a call the device emulates (fp16 on a CPU
    without it) takes 10-100x a native one."""
    warmup, iters = SHAPE_ITERS
    return time_calls_within([fn], device=device, warmup=warmup, iters=iters,
                             budget_s=SHAPE_BUDGET_S, min_iters=SHAPE_MIN_ITERS).min_s


def attention_overhead_s(attn, device, tdtype, group: int) -> float:
    q = torch.randn(1, group, 1, OVERHEAD_HEAD_DIM, device=device, dtype=tdtype)
    k = torch.randn(1, 1, OVERHEAD_SEQ_LEN, OVERHEAD_HEAD_DIM, device=device, dtype=tdtype)
    v = torch.randn_like(k)
    return _best(lambda: attn(q, k, v, 1.0), device)


def layer_overhead_s(attn, device, tdtype, group: int, layer_call, make_slot) -> float:
    gen = torch.Generator(device=device).manual_seed(7)
    slot = make_slot("layer", device, tdtype, 1, OVERHEAD_SEQ_LEN, group, 1, OVERHEAD_HEAD_DIM,
                     group * OVERHEAD_HEAD_DIM, gen)
    return _best(layer_call(slot, attn, 1.0), device)


HOT_MIN_HEADS = 8  # enough K/V heads to spread over the threads, as the step's batch x heads do


def attention_flops_per_s(attn, device, tdtype, group: int, head_dim: int, seq_len: int,
                          cache_bytes: int, overhead_s: float,
                          step_heads: int = HOT_MIN_HEADS) -> tuple[float, int]:
    """FLOP/s of `attn` at this (group, head_dim), K/V resident in the LLC.

    As many K/V heads as the step has (batch x kv_heads: the threads split the same
    number of independent matmuls), at least HOT_MIN_HEADS when the step has more, at most
    64, batch 1, in LLC / SHAPE_FRACTION: at a long seq_len the heads are shortened to fit
    (the matmuls keep their group x head_dim shape and a long sequence axis). The fixed
    overhead is taken off the time (never more than half).

    (HOT_MIN_HEADS heads for every step was used before: for MQA at batch 1, one K/V head,
    it measured 8 heads' worth of thread parallelism the step does not have, and the
    2026-11-23 sweep's MQA rows came out 1.3-2.3x slower than predicted.)"""
    e = torch.empty((), dtype=tdtype).element_size()
    budget = cache_bytes // SHAPE_FRACTION
    few = max(1, step_heads) if step_heads < HOT_MIN_HEADS else None
    length = max(16, min(seq_len, budget // ((few or HOT_MIN_HEADS) * 2 * head_dim * e)))
    per_head = 2 * length * head_dim * e
    n = max(1, min(few or 64, budget // per_head))
    q = torch.randn(1, n * group, 1, head_dim, device=device, dtype=tdtype)
    k = torch.randn(1, n, length, head_dim, device=device, dtype=tdtype)
    v = torch.randn_like(k)
    t = _best(lambda: attn(q, k, v, head_dim ** -0.5), device)
    flops = 2 * n * group * length * 2 * head_dim
    return flops / max(t - overhead_s, t / 2), n * 100_000 + length


def _kv_heads(n: int, seq_len: int, head_dim: int, device, tdtype):
    """(q, K, V) of `n` heads of (seq_len, head_dim), one query row each. Values do not
    change the bytes a call reads; a fill is ~14x faster than normal_() over the 268 MB
    the K/V stream reads on this project's VM (rounds re-allocate it)."""
    k = torch.empty(1, n, seq_len, head_dim, device=device, dtype=tdtype).fill_(0.5)
    v = torch.empty_like(k).fill_(0.25)
    q = torch.randn(1, n, 1, head_dim, device=device, dtype=tdtype)
    return q, k, v


def kv_stream_plan(attn, device, tdtype, head_dim: int, seq_len: int, total_bytes: int,
                   cache_bytes: int | None = None) -> tuple[int, int]:
    """(K/V heads the stream reads, bytes of the LLC flush before each repetition, 0 for
    none): kv_stream_heads's count, or when one call of it would take over
    STREAM_CALL_BUDGET_S, fewer heads with the LLC (`cache_bytes`; default total_bytes / 8,
    the stream's own sizing) flushed before each repetition instead.

    Found by timing the call itself, never extrapolated from a tiny one (whose heads sit in
    the cache, and whose time is the call's fixed cost: microseconds on a quiet host, ~20 ms
    where other jobs keep every core busy and a thread waits its turn): from
    PILOT_START_HEADS heads it grows towards half the budget, and stops once a call (the
    fastest of three, then of six) takes a quarter of the budget and four times the first
    size's: the heads' own work then outweighs the fixed cost, which kv_stream_bytes_per_s
    takes out. The stream is cut there (at least CUT_MIN_HEADS heads) unless that call
    scaled to the full stream fits the budget. The cut stream and its flush buffer together
    never hold more than the full stream would (the memory guard plans for that). Remembered per shape for the process: every round
    reads the same stream."""
    key = (attn, str(device), tdtype, head_dim, seq_len, total_bytes, cache_bytes)
    if key in _KV_PLANS:
        return _KV_PLANS[key]
    e = torch.empty((), dtype=tdtype).element_size()
    per_head = 2 * seq_len * head_dim * e
    n = kv_stream_heads(head_dim, seq_len, e, total_bytes)
    m = min(n, PILOT_START_HEADS)
    plan = (n, 0)
    fixed = None

    def best(q, k, v, warmup: int) -> float:  # the fastest of three calls
        return time_calls([lambda: attn(q, k, v, head_dim ** -0.5)], device=device,
                          warmup=warmup, iters=3).min_s

    while True:
        q, k, v = _kv_heads(m, seq_len, head_dim, device, tdtype)
        t = best(q, k, v, 1)
        fixed = t if fixed is None else fixed
        if m >= n:
            break  # the full stream, timed: its call is what it is
        enough = max(STREAM_CALL_BUDGET_S / 4, 4 * fixed)
        if t >= enough:  # long enough, unless another process slowed it: three more say
            t = min(t, best(q, k, v, 0))
        if t >= enough:
            if t * n / m <= STREAM_CALL_BUDGET_S:
                break  # the full stream's call fits the budget
            flush = flush_bytes(cache_bytes or max(1, total_bytes // 8))
            room = (n * per_head - tensor_bytes(flush)) // per_head
            cut = min(max(m, CUT_MIN_HEADS), room)
            if CUT_MIN_HEADS <= cut < n:
                plan = (cut, flush)
            break
        del q, k, v
        grow = max(STREAM_CALL_BUDGET_S / 2, 8 * fixed) / max(t, 1e-9)
        m = min(n, max(2 * m, int(m * min(grow, 64.0))))
    _KV_PLANS[key] = plan
    return plan


_KV_PLANS: dict = {}


def _agreed_plan(n: int, device, head_dim: int, seq_len: int, e: int, total_bytes: int,
                 cache_bytes: int | None) -> tuple[int, int]:
    """The K/V stream plan every rank of torch.distributed's group reads: the fewest heads
    of the ranks' own plans (an all-reduce), flushed when that cuts the stream (the flush's
    size depends on the shape alone, so the ranks agree on it too). Without an initialised
    group, `n` and its flush as they are."""
    import torch.distributed as dist

    full = kv_stream_heads(head_dim, seq_len, e, total_bytes)
    if dist.is_available() and dist.is_initialized():
        heads = torch.tensor([n], dtype=torch.int64, device=device)
        dist.all_reduce(heads, op=dist.ReduceOp.MIN)
        n = int(heads.item())
    return n, (flush_bytes(cache_bytes or max(1, total_bytes // 8)) if n < full else 0)


def kv_stream_bytes_per_s(attn, device, tdtype, head_dim: int, seq_len: int,
                          total_bytes: int, lockstep=None,
                          cache_bytes: int | None = None) -> tuple[float, int]:
    """K/V bytes per second `attn` reads from memory with one query row per K/V head.

    As many heads of (seq_len, head_dim) as make stream_bytes(LLC) of K and V: each call
    streams far more than the cache holds, so the next finds none of it resident. When
    such a call would take over STREAM_CALL_BUDGET_S (kv_stream_plan), fewer heads, the
    LLC flushed before each repetition. Returns (bytes/s, heads read per call); the heads
    fall short of kv_stream_heads's count exactly when the stream was cut.

    Under `lockstep` (tensor parallelism: a barrier of torch.distributed's ranks) the ranks
    agree on the fewest heads any of their plans reads, so that each streams as long as
    the others."""
    e = torch.empty((), dtype=tdtype).element_size()
    per_head = 2 * seq_len * head_dim * e
    n, flush_n = kv_stream_plan(attn, device, tdtype, head_dim, seq_len, total_bytes,
                                cache_bytes)
    if lockstep is not None:
        n, flush_n = _agreed_plan(n, device, head_dim, seq_len, e, total_bytes, cache_bytes)
    scale = head_dim ** -0.5
    q, k, v = _kv_heads(n, seq_len, head_dim, device, tdtype)
    if not flush_n:
        t = _median(lambda: attn(q, k, v, scale), device, lockstep)
        return n * per_head / t, n
    # A cut stream: its call is tens of milliseconds, so the call's fixed cost (and on a
    # busy host, a wait for a descheduled thread) is no longer negligible beside it. The
    # rate is the slope between the stream and its first 1/CUT_SLOPE_FRACTION of heads
    # (views, no copy), which takes both out: the marginal bytes per second, as the full
    # stream measures it (its fixed cost is a few parts in a thousand of its call); never
    # more than twice the plain rate (the fixed cost at most half the call), the weight
    # stream's rule.
    flush = torch.zeros(-(-flush_n // 8), dtype=torch.int64, device=device).sum
    few = max(1, n // CUT_SLOPE_FRACTION)
    qf, kf, vf = q[:, :few], k[:, :few], v[:, :few]
    t = _median(lambda: attn(q, k, v, scale), device, lockstep, flush)
    t_few = _median(lambda: attn(qf, kf, vf, scale), device, lockstep, flush)
    del q, k, v, qf, kf, vf, flush
    return (n - few) * per_head / max(t - t_few, (n - few) / n * t / 2), n


WEIGHT_PROBE_SEQ_LEN = 16  # the layer step with a cache this short is its weights' stream


def weight_stream_bytes_per_s(attn, device, tdtype, batch: int, heads: int, kv_heads: int,
                              head_dim: int, d_model: int, total_bytes: int,
                              overhead_s: float, lockstep=None,
                              cache_bytes: int | None = None) -> tuple[float, int]:
    """Weight bytes per second the layer step itself reads: the same call (fused qkv
    F.linear, cache write, attention, output F.linear) at this batch and these weight
    shapes over a WEIGHT_PROBE_SEQ_LEN-token cache, as many copies as make total_bytes,
    rotated. Its K/V is a few kB, so the time is the weights' stream and the call's
    overhead (taken off, never more than half).

    At most STREAM_MAX_COPIES copies: when more would be needed (small weights), the
    last-level cache (`cache_bytes`; default total_bytes / 8, the stream's own sizing) is
    flushed before each repetition instead, so each still reads its weights from memory.

    (F.linear timed alone on each weight shape was used before: in the 2026-11-23 CPU
    campaign it gave 3.43 GB/s for the MHA shapes and 5.0 for the MQA ones, while the
    layer steps themselves implied about 4.0 and 4.3, which skewed the predicted GQA/MQA
    speed-ups to 0.78 of the measured.)"""
    from kvcalc.measure import impls

    gen = torch.Generator(device=device).manual_seed(11)
    first = impls.make_slot("layer", device, tdtype, batch, WEIGHT_PROBE_SEQ_LEN, heads,
                            kv_heads, head_dim, d_model, gen)
    each = first.weight_bytes()
    copies, flushed = weight_stream_copies(each, total_bytes)
    slots = [first] + [impls.make_slot("layer", device, tdtype, batch, WEIGHT_PROBE_SEQ_LEN,
                                       heads, kv_heads, head_dim, d_model, gen)
                       for _ in range(copies - 1)]
    flush_buf = flush = None
    if flushed:
        # int64 words read, not written (as the timed step's flush): a sum over them runs
        # at memory speed on a CPU, and leaves no dirty lines to write back mid-call.
        llc = cache_bytes or max(1, total_bytes // 8)
        flush_buf = torch.zeros(-(-flush_bytes(llc) // 8), dtype=torch.int64, device=device)
        flush = flush_buf.sum
    scale = head_dim ** -0.5
    t = _median([impls.layer_call(sl, attn, scale) for sl in slots], device, lockstep, flush)
    del slots, first, flush, flush_buf
    return each / max(t - overhead_s, t / 2), copies


def projection_flops_per_s(device, tdtype, batch: int, d_in: int, d_out: int,
                           cache_bytes: int) -> tuple[float, int]:
    """FLOP/s of F.linear for (batch x d_in) @ (d_in x out), weights resident in the LLC."""
    e = torch.empty((), dtype=tdtype).element_size()
    rows = max(16, min(d_out, (cache_bytes // SHAPE_FRACTION) // (d_in * e)))
    x = torch.randn(batch, d_in, device=device, dtype=tdtype)
    w = torch.randn(rows, d_in, device=device, dtype=tdtype) * d_in ** -0.5
    t = _best(lambda: F.linear(x, w), device)
    return 2 * batch * d_in * rows / t, rows


def shape_ceilings(step: str, attn, device, tdtype, heads: int, kv_heads: int, head_dim: int,
                   d_model: int, seq_len: int, batch: int, cache_bytes: int,
                   stream: int | None = None, streamed: dict | None = None,
                   lockstep=None) -> ShapeCeilings:
    """Everything the prediction needs at this step's shapes. `stream`: bytes each
    streamed ceiling reads (default stream_bytes(cache_bytes); tests pass less).
    `streamed`: a dict shared by the groups of one run, so the streamed bandwidths (which
    do not depend on the K/V-head count) are measured once and every variant is
    predicted from the same figure. `lockstep` (tensor parallelism: a barrier of the
    ranks) runs before each streamed repetition: the ranks share the memory bus, so each
    streams while the others do, as in the step; unsynchronised, a rank that finished
    early left the other the whole bus (2026-11-23: 13.5-14.7 GB/s of weights per rank,
    more than the host's 19.6 GB/s read ceiling for the two together)."""
    stream = stream or stream_bytes(cache_bytes)
    from kvcalc.measure import impls

    g = heads // kv_heads
    if step == "attention":
        overhead = attention_overhead_s(attn, device, tdtype, g)
    else:
        overhead = layer_overhead_s(attn, device, tdtype, g, impls.layer_call, impls.make_slot)
    rate, packed = attention_flops_per_s(attn, device, tdtype, g, head_dim, seq_len, cache_bytes,
                                         overhead, step_heads=batch * kv_heads)
    n, length = divmod(packed, 100_000)
    method = (f"attention at group {g}, head_dim {head_dim} on {n} LLC-resident K/V head(s) of "
              f"{length} tokens; overhead: the call at seq_len {OVERHEAD_SEQ_LEN}, "
              f"head_dim {OVERHEAD_HEAD_DIM}")
    streamed = {} if streamed is None else streamed
    key = ("kv", attn, head_dim, seq_len, stream)
    if key not in streamed:
        streamed[key] = kv_stream_bytes_per_s(attn, device, tdtype, head_dim, seq_len, stream,
                                              lockstep, cache_bytes)
    kv_read, n_stream = streamed[key]
    e = torch.empty((), dtype=tdtype).element_size()
    method += (f"; K/V read: the same call streaming {n_stream} K/V heads, one query row each")
    cut = n_stream < kv_stream_heads(head_dim, seq_len, e, stream)
    if cut:
        method += (f" (cut to a {STREAM_CALL_BUDGET_S:g} s call from "
                   f"{kv_stream_heads(head_dim, seq_len, e, stream)}, the LLC flushed before "
                   "each repetition)")
    proj = w_read = None
    if step == "layer":
        key = ("w", attn, batch, heads, kv_heads, head_dim, d_model, stream)
        if key not in streamed:
            streamed[key] = weight_stream_bytes_per_s(attn, device, tdtype, batch, heads,
                                                      kv_heads, head_dim, d_model, stream,
                                                      overhead, lockstep, cache_bytes)
        w_read, w_copies = streamed[key]
        method += (f"; weights read: the layer step itself at batch {batch} over a "
                   f"{WEIGHT_PROBE_SEQ_LEN}-token cache, {w_copies} copies rotated"
                   + (", the LLC flushed before each" if weight_stream_copies(
                       layer_weight_bytes(torch.empty((), dtype=tdtype).element_size(), heads,
                                          kv_heads, head_dim, d_model), stream)[1] else ""))
        qkv_out = (heads + 2 * kv_heads) * head_dim
        r1, rows1 = projection_flops_per_s(device, tdtype, batch, d_model, qkv_out, cache_bytes)
        r2, rows2 = projection_flops_per_s(device, tdtype, batch, heads * head_dim, d_model,
                                           cache_bytes)
        f1, f2 = 2 * batch * d_model * qkv_out, 2 * batch * heads * head_dim * d_model
        proj = (f1 + f2) / (f1 / r1 + f2 / r2)  # both projections' FLOPs at their own rates
        method += (f"; projections: F.linear batch {batch} x {d_model} against {rows1} and "
                   f"{heads * head_dim} x {rows2} LLC-resident weight rows")
    return ShapeCeilings(rate, proj, overhead, method, kv_read, w_read, cut)


# --------------------------------------------------------------------------------
# The host: load, frequency, other processes
# --------------------------------------------------------------------------------
@record
class HostSample:
    wall_s: float
    busy_ticks: int  # all CPUs, from /proc/stat (user+nice+system+irq+softirq)
    steal_ticks: int
    self_ticks: int  # this process, all its threads (/proc/self/stat utime+stime)


def host_sample() -> HostSample | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
        steal = fields[7] if len(fields) > 7 else 0
        return HostSample(time.perf_counter(), busy, steal, int(stat[11]) + int(stat[12]))
    except (OSError, ValueError, IndexError):
        return None


def other_cores(a: HostSample | None, b: HostSample | None) -> tuple[float | None, float | None]:
    """(cores other processes kept busy, cores the hypervisor stole) between two samples."""
    if a is None or b is None or b.wall_s <= a.wall_s:
        return None, None
    hz = os.sysconf("SC_CLK_TCK")
    wall = b.wall_s - a.wall_s
    other = ((b.busy_ticks - a.busy_ticks) - (b.self_ticks - a.self_ticks)) / hz / wall
    return max(0.0, other), (b.steal_ticks - a.steal_ticks) / hz / wall


def cpu_mhz() -> float | None:
    """Mean current clock over the CPUs (cpufreq where present, else /proc/cpuinfo)."""
    values = []
    try:
        root = "/sys/devices/system/cpu"
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name, "cpufreq", "scaling_cur_freq")
            if name.startswith("cpu") and os.path.exists(path):
                with open(path) as f:
                    values.append(int(f.read()) / 1000)
        if not values:
            with open("/proc/cpuinfo") as f:
                values = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    except (OSError, ValueError, IndexError):
        return None
    return sum(values) / len(values) if values else None


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
