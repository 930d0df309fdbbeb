"""One `kvcalc measure` run: size, guard memory, measure ceilings, check, time, report rows.

Order of work, so that nothing big is allocated before the memory guard passed:
1. resolve the device, dtype and sizes (device defaults where the user gave none);
2. plan every (step, kv_heads) group: predicted bytes and FLOPs (predict.py, i.e.
   kvcalc.formulas), how many distinct caches defeat L2, and the bytes it will hold;
3. refuse (KvcalcError, with a smaller setting that fits) if the largest group
   does not fit in the free memory;
4. measure the ceilings (copy, read, matmul) on this device;
5. per group: allocate the caches, check that their bytes equal the formula,
   compute a float64 reference; per implementation: check it against the
   reference (a failure is reported, not timed), then time it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, field

import torch

from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_bytes_per_token_per_layer
from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure import impls
from kvcalc.measure.config import ALL_IMPLS, AUTO_CANDIDATES, DEFAULTS, MeasureConfig, MeasureResult, Progress
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.predict import StepPrediction, block_spec, predict, time_terms
from kvcalc.measure.timing import summarise, time_calls
from kvcalc.report.units import human_bytes, human_seconds
from kvcalc.roofline import roofline
from kvcalc.dtypes import MAX_WIDTH, dtype as _dtype
from kvcalc.spec import ModelSpec

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
    spec: ModelSpec
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


def attention_kind(heads: int, kv_heads: int) -> str:
    return "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"


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


def shape_ceilings_need(step: str, spec: ModelSpec, batch: int, seq_len: int, dtype: str,
                        impl_names: list[str], sdpa_copies_kv: bool, cache_bytes: int,
                        stream: int) -> int:
    """What the ceilings at the step's shapes (terms.shape_ceilings, refresh_streams) hold at
    once, as allocated: the K/V stream's heads with its queries, outputs and each
    implementation's temporaries (with a tiny head_dim the logits outweigh K/V); the weight
    stream's copies of the layer, counted with their per-tensor overhead, and its flush."""
    e = _dtype(dtype).nbytes(1)
    n = terms_mod.kv_stream_heads(spec.head_dim, seq_len, e, stream)
    kv = 2 * terms_mod.tensor_bytes(n * seq_len * spec.head_dim * e)
    q_out = 2 * terms_mod.tensor_bytes(n * spec.head_dim * e)
    kv_need = kv + q_out + max(attention_workspace(name, kv, LOGIT_BYTES * n * seq_len, 1, e,
                                                   sdpa_copies_kv) for name in impl_names)
    w_need = 0
    if step == "layer":
        w_need = terms_mod.weight_stream_need_bytes(e, batch, spec.heads, spec.kv_heads,
                                                    spec.head_dim, spec.d_model, stream,
                                                    cache_bytes)
    return terms_mod.shape_workspace_bytes(cache_bytes, max(kv_need, w_need))


def needed_bytes(pred: StepPrediction, spec: ModelSpec, batch: int, seq_len: int,
                 dtype: str, impl_names: list[str], slots: int, flush_bytes: int,
                 cuda_graphs: bool, sdpa_copies_kv: bool) -> dict[str, int]:
    """What a group holds at its peak, by part (bytes; an upper bound)."""
    e = _dtype(dtype).nbytes(1)
    g = spec.heads // spec.kv_heads
    small = e * batch * (spec.heads * spec.head_dim + spec.d_model)  # q or x
    logits = LOGIT_BYTES * batch * spec.heads * seq_len
    ws = max(attention_workspace(n, pred.kv_cache_bytes, logits, g, e, sdpa_copies_kv)
             for n in impl_names)
    if cuda_graphs:
        # Each captured graph keeps its own memory pool, rounded up to whole allocator
        # segments (2 MiB small, 20 MiB large).
        ws = slots * (ws + GRAPH_POOL_SLACK_BYTES)
    # The float64 reference: one sequence's K and V of one head at a time (two for
    # the layer step, which copies a whole sequence), its logits, and the output.
    per_seq_cache = pred.kv_cache_bytes // batch
    reference = (2 * seq_len * spec.head_dim * 8 + 2 * g * seq_len * 8
                 + 8 * batch * spec.heads * spec.head_dim)
    if pred.step == "layer":
        reference += (8 // e) * (per_seq_cache + pred.weight_bytes) + 8 * batch * (
            (spec.heads + 2 * spec.kv_heads) * spec.head_dim + spec.d_model)
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
            spec = block_spec(config.heads, kv, config.head_dim, config.d_model)
            pred = predict(step, spec, batch, seq_len, dtype)
            slot_bytes = pred.kv_cache_bytes + pred.weight_bytes
            slots, flush, regime = l2_plan(slot_bytes, device_meta["cache_bytes"], cache_name,
                                           config.l2, "cache" if step == "attention" else "layer")
            parts = needed_bytes(pred, spec, batch, seq_len, dtype, impl_names, slots, flush,
                                 config.cuda_graphs, sdpa_copies.get(kv, False))
            parts["shape_ceilings"] = shape_ceilings_need(
                step, spec, batch, seq_len, dtype, impl_names, sdpa_copies.get(kv, False),
                device_meta["cache_bytes"], stream or terms_mod.stream_bytes(
                    device_meta["cache_bytes"], 8 * device_meta["cache_bytes"] if flush
                    else slots * slot_bytes))
            groups.append(Group(step, kv, spec, pred, impl_names, slots, flush, regime,
                                sum(parts.values()), parts))
    return groups


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


def default_batch(config: MeasureConfig, seq_len: int, dtype: str, device_type: str) -> int:
    """Smallest power of two whose cache (given kv_heads) reaches the device's target size."""
    d = DEFAULTS[device_type]
    spec = block_spec(config.heads, config.kv_heads, config.head_dim, config.d_model)
    per_seq = seq_len * kv_bytes_per_token_per_layer(spec, dtype)
    want = max(1, math.ceil(d.target_cache_bytes / per_seq))
    b = 1
    while b < want and b < d.max_default_batch:
        b *= 2
    return b


# --------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------
def run(config: MeasureConfig, progress: Progress | None = None,
        ceiling_buffer_bytes: int | None = None, ceilings: dict | None = None,
        check_only: bool = False) -> MeasureResult | None:
    """Measure; see the module docstring. `progress(description, done, total)` is told
    of each phase. `ceiling_buffer_bytes` shrinks the ceiling buffers (tests only).
    `ceilings` reuses ones measured earlier in the same process (a sweep);
    `check_only` stops after the memory guard, before anything large is allocated.

    An allocation that fails anyway (memory taken by another process meanwhile, a limit
    the guard could not see) is refused in a KvcalcError, never a torch traceback."""
    state = {"kind": "cpu", "phase": "preparing", "planned": None, "usable": None}
    try:
        return _run(config, progress, ceiling_buffer_bytes, ceilings, check_only, state)
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise KvcalcError(_oom_message(e, state)) from None


def _oom_message(e: BaseException, state: dict) -> str:
    kind = state["kind"]
    msg = f"out of {kind} memory while {state['phase']} ({impls.allocation_failure(e)})"
    if state["planned"] is not None:
        msg += (f"; the memory guard planned a peak of {human_bytes(state['planned'])} of "
                f"{human_bytes(state['usable'])} usable")
    words = _limit_words(kind)
    return msg + (f" under {words}" if words else "") + (
        "; try a smaller --seq-len or --batch, or free some memory")


def _limit_words(kind: str) -> str:
    """Words naming a limit that bounds this process's memory below the free RAM, or ""."""
    return ceil_mod.cpu_memory_room()[1] if kind == "cpu" else ""


def _run(config: MeasureConfig, progress: Progress | None, ceiling_buffer_bytes: int | None,
         ceilings: dict | None, check_only: bool, state: dict) -> MeasureResult | None:
    device = ceil_mod.resolve_device(config.device)
    meta = ceil_mod.device_info(device)
    kind = device.type
    state["kind"] = kind
    if config.cuda_graphs and kind != "cuda":
        raise KvcalcError("--cuda-graphs needs a CUDA device (this run is on the cpu)")
    defaults = DEFAULTS[kind]
    dtype = config.dtype or defaults.dtype
    tdtype = ceil_mod.torch_dtype(dtype)
    warmup = defaults.warmup if config.warmup is None else config.warmup
    iters = config.iters or defaults.iters
    run_notes: list[str] = []

    # --- shapes, validated before anything is allocated (the SDPA probes included) ---
    if config.d_model is None and config.heads * config.head_dim > MAX_WIDTH:
        raise KvcalcError(f"--heads x --head-dim = {config.heads * config.head_dim:,} is absurdly "
                          f"large (limit {MAX_WIDTH:,})")
    for kv in config.kv_variants():
        block_spec(config.heads, kv, config.head_dim, config.d_model)
    seq_len = config.seq_len or defaults.seq_len
    free = ceil_mod.free_bytes(device)
    usable = int(free * config.memory_fraction)
    state["usable"] = usable
    state["phase"] = "probing SDPA's backends"
    probe_seq_len = min(PROBE_SEQ_LEN, seq_len)
    probe_need = probe_bytes(config.heads, max(config.kv_variants()), config.head_dim,
                             probe_seq_len, dtype)

    def probe(kv: int) -> dict[str, str]:
        if probe_need > usable:
            raise KvcalcError(f"even a {probe_seq_len}-token SDPA probe needs "
                              f"{human_bytes(probe_need)} but {human_bytes(usable)} of {kind} "
                              f"memory is usable; try a smaller --heads or --head-dim")
        return impls.probe_sdpa(device, tdtype, config.heads, kv, config.head_dim, probe_seq_len)

    # --- implementations ---
    requested = config.impl_names()
    names: list[str] = []
    for n in requested:
        if n == "all":
            names.extend(ALL_IMPLS[kind])
        else:
            names.append(n)
    names = list(dict.fromkeys(names))
    concrete = [n for n in names if n != "auto"]
    batch = config.batch or default_batch(config, seq_len, dtype, kind)
    sized = (seq_len, batch)

    def guard(impl_names: list[str], copies: dict[int, bool], sl: int, b: int) -> tuple[int, int]:
        """(seq_len, batch) that fit, defaults halved as needed; or refuse."""
        def peak(s: int, x: int) -> int:
            gs = plan_groups(config, s, x, dtype, impl_names, meta, copies, ceiling_buffer_bytes)
            return max(g.needed_bytes for g in gs)

        need = peak(sl, b)
        while need > usable and config.batch is None and b > 1:
            b //= 2
            need = peak(sl, b)
        while need > usable and config.seq_len is None and sl > 128:
            sl //= 2
            need = peak(sl, b)
        if need > usable:
            raise KvcalcError(_refusal(need, free, usable, kind, sl, b, peak, config,
                                       lambda: fixed_need(impl_names, copies, sl, b)))
        return sl, b

    def fixed_need(impl_names: list[str], copies: dict[int, bool], s: int, x: int) -> int:
        """What no smaller --seq-len, --batch or --d-model shrinks: the K/V stream at its
        least (8x the LLC) and the flush of a cache too small to rotate."""
        stream = ceiling_buffer_bytes or terms_mod.stream_bytes(meta["cache_bytes"])
        return max(shape_ceilings_need("attention", g.spec, x, s, dtype, impl_names,
                                       copies.get(g.kv_heads, False), meta["cache_bytes"], stream)
                   + g.needed_breakdown["flush"]
                   for g in plan_groups(config, s, x, dtype, impl_names, meta, copies,
                                        ceiling_buffer_bytes))

    # A request that cannot fit even with the leanest candidates and no K/V copies is
    # refused before any SDPA probe allocates anything.
    lean = concrete + ([c for c in AUTO_CANDIDATES[kind] if c != "sdpa-flash"] if "auto" in names else [])
    seq_len, batch = guard(list(dict.fromkeys(lean)), {}, seq_len, batch)

    auto_pick, auto_reason = _auto_choice(device, probe, config.kv_heads) if "auto" in names else ("", "")
    auto_candidates = [c for c in AUTO_CANDIDATES[kind] if c != "sdpa-flash" or auto_pick == c]
    concrete_for_memory = list(dict.fromkeys(concrete + (auto_candidates if "auto" in names else [])))

    # Does the unpinned SDPA call copy K/V on this device and dtype? (tiny probe)
    sdpa_probe: dict[int, dict[str, str]] = {}
    if "sdpa" in concrete_for_memory:
        for kv in config.kv_variants():
            sdpa_probe[kv] = probe(kv)
    sdpa_copies = {kv: p.get("kv_copied") == "yes" for kv, p in sdpa_probe.items()}

    # --- the memory guard, with what the probes found ---
    seq_len, batch = guard(concrete_for_memory, sdpa_copies, seq_len, batch)
    if (seq_len, batch) != sized:
        run_notes.append(f"default sizes reduced to fit free memory: seq_len {seq_len}, batch {batch}")
    ceiling_ws = ceil_mod.ceiling_workspace_bytes(kind, dtype) if ceiling_buffer_bytes is None \
        else 2 * ceiling_buffer_bytes
    if ceiling_ws > usable:
        words = _limit_words(kind)
        raise KvcalcError(f"the bandwidth ceilings need {human_bytes(ceiling_ws)} but only "
                          f"{human_bytes(usable)} of {kind} memory is usable"
                          + (f" under {words}" if words else ""))
    if check_only:
        return None
    groups = plan_groups(config, seq_len, batch, dtype, concrete_for_memory, meta, sdpa_copies,
                         ceiling_buffer_bytes)
    streamed: dict = {}
    for g in groups:
        g.impls = names
        # The streamed ceilings read what this group's timing rotates over (flushed: 8x LLC).
        g.stream_bytes = ceiling_buffer_bytes or terms_mod.stream_bytes(
            meta["cache_bytes"], 8 * meta["cache_bytes"] if g.flush_bytes
            else g.slots * (g.pred.kv_cache_bytes + g.pred.weight_bytes))
        g.streamed = streamed
    state["planned"] = max([ceiling_ws] + [g.needed_bytes for g in groups])

    total = 1 + sum(1 + len(g.impls) for g in groups)
    done = 0

    def tick(msg: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(msg, done, total)

    state["phase"] = "measuring the bandwidth ceilings"
    if ceilings is None:
        if progress is not None:
            progress(f"measuring {kind} ceilings", 0, total)
        ceilings = ceil_mod.get_ceilings(device, meta, dtype, config.ceilings_cache,
                                         ceiling_buffer_bytes)
    tick("ceilings ready")

    # --compare puts every variant through one implementation, so a speed-up compares K/V
    # traffic, not two kernels: auto races at the given kv_heads first, and its pick then
    # runs MHA and MQA too.
    by_group: dict[int, list[dict]] = {}
    order = sorted(range(len(groups)), key=lambda i: (
        config.steps().index(groups[i].step), groups[i].kv_heads != config.kv_heads))
    picks: dict[str, str] = {}
    for i in order:
        group = groups[i]
        cands, reason = auto_candidates, auto_reason
        if config.compare and "auto" in names and group.step in picks:
            cands = [picks[group.step]]
            reason = (f"--compare: auto's pick at kv_heads={config.kv_heads} for every variant"
                      + (f"; {auto_reason}" if auto_reason else ""))
        state["phase"] = f"measuring the {group.step} step at kv_heads={group.kv_heads}"
        by_group[i] = _run_group(group, config, device, meta, dtype, tdtype, seq_len, batch,
                                 warmup, iters, ceilings, cands, reason, sdpa_probe, tick)
        for r in by_group[i]:
            if r["auto_pick"] and group.kv_heads == config.kv_heads:
                picks[group.step] = r["impl"]
    rows: list[dict] = [r for i in range(len(groups)) for r in by_group[i]]
    if config.compare:
        _add_speedups(rows, config.heads)
    # Every row names where and when it was measured (reports are read row by row).
    stamp = {"device": meta["name"], "torch_version": meta["torch_version"],
             "cuda_version": meta.get("cuda") or "", "measured_at": _utc_now()}
    rows = [{**stamp, **r} for r in rows]

    resolved = {
        **{k: v for k, v in asdict(config).items() if k != "ceilings_cache"},
        "ceilings_cache": str(config.ceilings_cache) if config.ceilings_cache else None,
        "seq_len": seq_len, "batch": batch, "dtype": dtype, "warmup": warmup, "iters": iters,
        "d_model": groups[0].spec.d_model,
        "device_resolved": kind, "impls": names,
        "auto_candidates": auto_candidates if "auto" in names else None,
        "free_memory_bytes": free, "peak_planned_bytes": max(g.needed_bytes for g in groups),
        "notes": run_notes,
    }
    return MeasureResult(rows=rows, device=meta, ceilings=ceilings, config=resolved)


def _auto_choice(device: torch.device, probe, kv_heads: int) -> tuple[str, str]:
    """Whether the fused flash path is among auto's candidates on this device and dtype.

    auto then times every candidate (AUTO_CANDIDATES) that passes the correctness
    check and keeps the fastest: "fastest correct" is measured, not assumed.
    """
    if device.type != "cuda":
        return "", ""
    result = probe(kv_heads)
    if result.get("flash") == "ok":
        return "sdpa-flash", ""
    return "", f"flash refused ({result.get('flash')})"


def _refusal(need: int, free: int, usable: int, kind: str, seq_len: int, batch: int,
             peak, config: MeasureConfig, fixed_need=None) -> str:
    words = _limit_words(kind)
    msg = (f"needs {human_bytes(need)} but {human_bytes(free)} is free on {kind} "
           + (f"under {words} " if words else "")
           + f"({config.memory_fraction:.0%} usable: {human_bytes(usable)})")
    tries = []
    sl = _largest_fitting(lambda s: peak(s, batch) <= usable, seq_len)
    if sl:
        tries.append(f"--seq-len {sl}")
    b = _largest_fitting(lambda x: peak(seq_len, x) <= usable, batch)
    if b:
        tries.append(f"--batch {b}")
    if tries:
        return f"{msg}; try {' or '.join(tries)}"
    if fixed_need is not None:
        # What smaller sizes do not shrink: the streamed ceilings read 8x the LLC at any
        # shape, and a cache too small to rotate is flushed with 1.5x the LLC.
        fixed = fixed_need()
        if fixed > usable:
            return (f"{msg}; smaller sizes do not fit either: the bandwidth ceilings at the "
                    f"step's shapes and the cache flush alone need {human_bytes(fixed)} (they "
                    f"stream at least 8x the {_cache_name(kind)}, whatever --seq-len and "
                    f"--batch); free some memory" + (" or raise the limit" if words else ""))
    if config.step in ("layer", "both"):
        return (f"{msg}; even --seq-len 1 --batch 1 does not fit: the layer step holds its "
                f"weights (d_model {config.d_model or config.heads * config.head_dim:,}); try a "
                f"smaller --d-model, fewer heads or a smaller head_dim")
    return f"{msg}; even --seq-len 1 --batch 1 does not fit: try fewer heads or a smaller head_dim"


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_group(group: Group, config: MeasureConfig, device, meta, dtype, tdtype, seq_len, batch,
               warmup, iters, ceilings, auto_candidates, auto_reason, sdpa_probe, tick) -> list[dict]:
    spec, pred = group.spec, group.pred
    gen = torch.Generator(device=device).manual_seed(config.seed * 1000 + group.kv_heads)
    try:
        slots = [impls.make_slot(group.step, device, tdtype, batch, seq_len, spec.heads,
                                 spec.kv_heads, spec.head_dim, spec.d_model, gen)
                 for _ in range(group.slots)]
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise KvcalcError(f"out of {device.type} memory allocating {group.slots} x "
                          f"{human_bytes(pred.kv_cache_bytes + pred.weight_bytes)} (planned peak "
                          f"{human_bytes(group.needed_bytes)}); try a smaller --seq-len or --batch") from None
    # Accounting: the tensors' bytes are the formula's bytes, exactly.
    for s in slots:
        if s.cache_bytes() != pred.kv_cache_bytes:
            raise KvcalcError(f"accounting error: allocated K/V is {s.cache_bytes():,} B but the "
                              f"formula says {pred.kv_cache_bytes:,} B")
        if s.weight_bytes() != pred.weight_bytes:
            raise KvcalcError(f"accounting error: allocated weights are {s.weight_bytes():,} B but "
                              f"the formula says {pred.weight_bytes:,} B")
    scale = spec.head_dim ** -0.5
    s0 = slots[0]
    try:
        # int64 words: a sum over them runs at memory speed on a CPU too (uint8's does not).
        flush_buf = (torch.zeros(-(-group.flush_bytes // 8), dtype=torch.int64, device=device)
                     if group.flush_bytes else None)
        reference = (impls.reference_attention(s0.q, s0.k, s0.v, scale)
                     if group.step == "attention" else impls.reference_layer(s0, scale))
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise KvcalcError(f"out of {device.type} memory for the flush buffer or the float64 "
                          f"reference (planned peak {human_bytes(group.needed_bytes)}); try a "
                          f"smaller --seq-len or --batch") from None
    # Flush by reading, not writing: a written buffer leaves dirty lines whose write-back
    # would land inside the next timed call.
    flush = flush_buf.sum if flush_buf is not None else None
    _sync(device)
    tick(f"{group.step} {attention_kind(spec.heads, spec.kv_heads)} kv_heads={spec.kv_heads}: "
         f"{group.slots} x {human_bytes(pred.kv_cache_bytes)} allocated")

    rows = []
    args = (group, config, device, meta, dtype, seq_len, batch, warmup, iters, ceilings, slots,
            flush, scale, reference, sdpa_probe)
    measured: dict[str, dict] = {}
    for name in group.impls:
        if name == "auto":
            # Time every candidate that passes the correctness check; keep the fastest.
            tried = {c: measured.get(c) or _measure_impl(c, *args) for c in auto_candidates}
            measured.update(tried)
            timed = {c: r for c, r in tried.items() if r["correct"] and r["median_s"]}
            if not timed:
                raise KvcalcError("auto: no implementation passed the correctness check: "
                                  + "; ".join(f"{c}: {r['note']}" for c, r in tried.items()))
            best = min(timed, key=lambda c: timed[c]["median_s"])
            race = ", ".join(f"{c} {human_seconds(r['median_s'])}" for c, r in timed.items())
            failed = [c for c in tried if c not in timed]
            why = (f"auto on {device.type}: {best}, the fastest correct of {race}"
                   + (f" ({', '.join(failed)} failed)" if failed else "")
                   + (f"; {auto_reason}" if auto_reason else ""))
            if auto_reason.startswith("--compare"):
                why = f"auto on {device.type}: {best} ({auto_reason})"
            if best in group.impls:  # asked for by name too: one row is enough
                timed[best]["auto_pick"] = True
                timed[best]["note"] = "; ".join([why] + ([timed[best]["note"]] if timed[best]["note"] else []))
                continue
            row = dict(timed[best])
            row["note"] = "; ".join([why] + ([row["note"]] if row["note"] else []))
            row["auto_pick"] = True
            row["impl_requested"] = "auto"
        else:
            row = measured.get(name) or _measure_impl(name, *args)
            measured[name] = row
        rows.append(row)
        tick(f"{group.step} kv_heads={spec.kv_heads} {row['impl']}: "
             + ("ok" if row["median_s"] is not None else "failed"))
    del args, slots, s0, reference, flush, flush_buf
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _measure_impl(name, group: Group, config, device, meta, dtype, seq_len, batch, warmup, iters,
                  ceilings, slots, flush, scale, reference, sdpa_probe) -> dict:
    spec, pred = group.spec, group.pred
    g = spec.heads // spec.kv_heads
    attn = impls.get_impl(name)
    build = impls.attention_call if group.step == "attention" else impls.layer_call
    calls = [build(s, attn, scale) for s in slots]
    copy_bw = ceilings["copy_bytes_per_s"]
    read_bw = ceilings.get("read_bytes_per_s") or copy_bw
    mm_flops = ceilings["matmul_flops_per_s"]
    # The square-matmul roofline, kept for reference: max(bytes / read, FLOPs / square matmul).
    rl = roofline(pred.bytes, pred.flops, max(1, int(read_bw)), max(1, int(mm_flops)), batch)
    shape = _shape_ceilings(group, name, attn, device, dtype, seq_len, batch, meta)
    rounds = max(1, DEFAULTS[device.type].rounds)

    def refreshed():
        """The streamed bandwidths again, right before a share of this row's timing: the
        host's memory bandwidth drifts (other tenants), so each figure is taken next to
        the repetitions it predicts; the row uses the median over its rounds."""
        try:
            return terms_mod.refresh_streams(
                shape, group.step, attn, device, ceil_mod.torch_dtype(dtype), spec.heads,
                spec.kv_heads, spec.head_dim, spec.d_model, seq_len, batch,
                group.stream_bytes or terms_mod.stream_bytes(meta["cache_bytes"]), {},
                cache_bytes=meta["cache_bytes"])
        except RuntimeError as e:  # an implementation that refuses these inputs: reported below
            if impls.out_of_memory(e):
                raise
            return shape

    round_shapes = [refreshed()]
    shape = round_shapes[0]
    row = {
        "device": meta["name"],
        "torch_version": meta["torch_version"],
        "dtype": dtype,
        "step": group.step,
        "impl": name,
        # "auto" when the row exists only as auto's pick; speed-ups pair auto with auto,
        # whichever implementation won at each K/V-head count.
        "impl_requested": name,
        "auto_pick": False,
        "backend": "",
        "attention": attention_kind(spec.heads, spec.kv_heads),
        "heads": spec.heads,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "d_model": spec.d_model,
        "layers": config.layers,
        "seq_len": seq_len,
        "batch": batch,
        "kv_cache_bytes": pred.kv_cache_bytes,
        "weight_bytes": pred.weight_bytes,
        "bytes_moved": pred.bytes,
        "flops": pred.flops,
        "correct": False,
        "rel_error": None,
        "median_s": None,
        "min_s": None,
        "p10_s": None,
        "p90_s": None,
        "iters": 0,
        **_prediction(pred, read_bw, shape, group.step, g),
        "attention_flops_per_s_at_shape": shape.attention_flops_per_s,
        "projection_flops_per_s_at_shape": shape.projection_flops_per_s,
        "roofline_s": rl.time_s,
        "achieved_bytes_per_s": None,
        "ceiling_bytes_per_s": read_bw,
        "fraction_of_ceiling": None,
        "measured_over_predicted": None,
        "achieved_flops_per_s": None,
        "ceiling_flops_per_s": mm_flops,
        "l2_regime": group.l2_regime,
        "timer": "cuda-events" if device.type == "cuda" else "perf_counter",
        "cuda_graphs": bool(config.cuda_graphs),
        "rounds": 1,
        "speedup_vs_mha": None,
        "predicted_speedup_vs_mha": None,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "cpu_mhz": None,
        "load_avg_1m": None,
        "other_cpu_cores": None,
        "steal_cpu_cores": None,
        "loaded": None,
        "note": "",
    }
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out, ops = impls.traced(calls[0])
            _sync(device)
        except RuntimeError as e:
            if impls.out_of_memory(e):  # not a refusal of these inputs: run() says so
                raise
            # A pinned SDPA backend says why it refused in a warning; the error is generic.
            why = impls.refusal_reason([str(w.message) for w in caught],
                                       name[5:] if name.startswith("sdpa-") else "", repr(e))
            if name.startswith("sdpa-"):
                row["backend"] = "refused"
                why = f"SDPA's {name[5:]} backend refused these inputs on {device.type}: {why}"
            else:
                row["backend"] = "error"
            row["note"] = f"failed, not timed: {impls._short(why, 200)}"
            return row
    info = impls.impl_backend(name, ops)
    row["backend"] = info.backend
    notes.extend(_backend_notes(name, info, g, pred, device, sdpa_probe.get(spec.kv_heads)))
    err = impls.relative_error(out, reference)
    del out
    tol = impls.TOLERANCE[dtype]
    row["rel_error"] = err if math.isfinite(err) else None
    if not err < tol:
        shown = "NaN/inf or mismatched output" if not math.isfinite(err) else f"{err:.3g}"
        failed = f"failed correctness vs float64 (rel. error {shown} >= {tol:g}), not timed"
        row["note"] = "; ".join([failed] + notes)
        return row
    row["correct"] = True
    before = terms_mod.host_sample()
    per_round = -(-iters // rounds)
    values: list[float] = []
    try:
        for r in range(rounds):
            if r:
                round_shapes.append(refreshed())
            t = time_calls(calls, device=device, warmup=warmup if r == 0 else 1,
                           iters=per_round, flush=flush, cuda_graphs=config.cuda_graphs)
            values.extend(t.values_s)
        after = terms_mod.host_sample()
    except RuntimeError as e:
        if impls.out_of_memory(e):
            raise
        row["correct"] = True
        row["note"] = "; ".join([f"timing failed: {impls._short(str(e))}"] + notes)
        return row
    if rounds > 1:
        t = summarise(values, t.timer, t.cuda_graphs, t.host_s_per_call)
        row.update(_prediction(pred, read_bw, terms_mod.median_streams(round_shapes), group.step, g))
        notes.append(f"{rounds} rounds of streamed ceilings then {per_round} repetitions; "
                     "K/V and weight read rates are the rounds' medians")
    row["rounds"] = rounds
    achieved = pred.bytes / t.median_s
    if t.p10_s > 0 and t.p90_s > 1.5 * t.p10_s:
        notes.append(f"noisy: p90 is {t.p90_s / t.p10_s:.1f}x p10")
    if t.min_s > 0 and t.median_s > 2 * t.min_s:
        notes.append(f"noisy: median is {t.median_s / t.min_s:.1f}x the fastest repetition")
    if t.median_s < 0.95 * rl.time_s:
        notes.append("faster than the roofline bound: the working set was partly cache-resident "
                     "or a ceiling was measured low")
    others, steal = terms_mod.other_cores(before, after)
    load = terms_mod.load_average()
    loaded = None
    if device.type == "cpu" and others is not None:
        loaded = others > terms_mod.LOADED_CORES or (steal or 0) > terms_mod.LOADED_CORES
        if loaded:
            notes.append(f"LOADED host: other processes kept {others:.2f} cores busy"
                         + (f" and the hypervisor stole {steal:.2f}" if steal else "")
                         + " during timing"
                         + (f" (1-minute load {load:.1f})" if load is not None else ""))
    row.update(cpu_mhz=terms_mod.cpu_mhz() if device.type == "cpu" else None, load_avg_1m=load,
               other_cpu_cores=others, steal_cpu_cores=steal, loaded=loaded)
    if t.host_s_per_call is not None and t.host_s_per_call > t.median_s:
        # The queue fill let the GPU run the calls back to back, so the median is GPU
        # time; a serving loop launching the same way would run at the host's rate.
        notes.append(f"launch-bound: the host took {human_seconds(t.host_s_per_call)} to queue "
                     f"each call, the GPU {human_seconds(t.median_s)} to run it"
                     + ("" if config.cuda_graphs else "; try --cuda-graphs"))
    if name == "sdpa-flash" and group.step == "attention" and device.type == "cuda":
        notes.append("bytes_moved omits flash-decoding's split-KV partials (fp32, written and "
                     "read back; their count is the kernel's own heuristic)")
    row.update(
        median_s=t.median_s,
        min_s=t.min_s,
        p10_s=t.p10_s,
        p90_s=t.p90_s,
        iters=t.samples,
        timer=t.timer,
        achieved_bytes_per_s=achieved,
        fraction_of_ceiling=achieved / read_bw,
        measured_over_predicted=t.median_s / row["predicted_s"],
        achieved_flops_per_s=pred.flops / t.median_s,
    )
    row["note"] = "; ".join(notes)
    return row


def _prediction(pred: StepPrediction, read_bw: float, shape, step: str, group: int) -> dict:
    """A row's predicted time, split into its terms, from the ceilings in `shape`."""
    tt = time_terms(pred, read_bw, shape.attention_flops_per_s, shape.projection_flops_per_s,
                    shape.overhead_s, kv_read_bytes_per_s=shape.kv_read_bytes_per_s,
                    weight_read_bytes_per_s=shape.weight_read_bytes_per_s,
                    group=group)
    return {
        "predicted_s": tt.total_s,
        "predicted_kv_s": tt.kv_s,
        "predicted_weights_s": tt.weights_s,
        "predicted_activations_s": tt.activations_s,
        "predicted_attention_compute_s": tt.attention_compute_s,
        "predicted_extra_compute_s": tt.extra_compute_s,
        "predicted_projection_compute_s": tt.projection_compute_s,
        "predicted_overhead_s": tt.overhead_s,
        "kv_read_bytes_per_s": shape.kv_read_bytes_per_s,
        "weight_read_bytes_per_s": shape.weight_read_bytes_per_s,
        "bound_detail": (f"attention {tt.attention_bound}"
                         + (f", projections {tt.projection_bound}" if step == "layer" else "")),
        "bound": tt.bound,
    }


def _shape_ceilings(group: Group, name: str, attn, device, dtype, seq_len, batch, meta):
    """The step's FLOP/s at its shapes and its per-call overhead, measured once per
    (group, impl); an implementation that refuses these inputs is predicted from grouped's."""
    spec = group.spec
    failed: list[str] = []
    for which, fn in dict.fromkeys(((name, attn), ("grouped", impls.attention_grouped))):
        if which in group.shape_ceilings:
            return group.shape_ceilings[which]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shape = terms_mod.shape_ceilings(
                    group.step, fn, device, ceil_mod.torch_dtype(dtype), spec.heads,
                    spec.kv_heads, spec.head_dim, spec.d_model, seq_len, batch, meta["cache_bytes"],
                    group.stream_bytes, group.streamed)
        except RuntimeError as e:
            if impls.out_of_memory(e):  # not the implementation's refusal: run() says so
                raise
            failed.append(f"{which}: {impls._short(str(e))}")
            continue
        group.shape_ceilings[which] = shape
        return shape
    raise KvcalcError("the ceilings at the step's shapes failed for " + "; ".join(failed)
                      + "; nothing to predict from")


def _backend_notes(name: str, info: impls.BackendInfo, g: int, pred: StepPrediction, device,
                   probe: dict[str, str] | None) -> list[str]:
    notes = []
    if name == "repeat":
        how = (f"K/V repeated {g}x per query head (repeat_interleave)" if g > 1
               else "K/V copied by repeat_interleave(1)")
        notes.append(f"{how}: {human_bytes(g * pred.kv_cache_bytes)} written and read again "
                     "beyond bytes_moved")
    elif name == "grouped":
        notes.append("each K/V head read once; fp32 logits written and read back")
    else:
        if info.backend == "math":
            notes.append("SDPA ran the math backend" + (" (silent fall-back)" if name == "sdpa" else ""))
        elif info.backend == "flash (cpu)":
            notes.append("SDPA ran the CPU flash kernel")
        else:
            notes.append(f"SDPA ran the {info.backend} backend")
        if info.kv_copied:
            notes.append(f"K/V expanded per query head before the kernel ({g}x the cache copied)")
        elif g > 1:
            notes.append("enable_gqa: no K/V copy seen at the dispatcher")
        if name == "sdpa" and probe:
            ok = [b for b, _ in impls.PROBE_ORDER if probe.get(b) == "ok"]
            refused = [f"{b} ({probe[b]})" for b, _ in impls.PROBE_ORDER
                       if b in probe and probe[b] != "ok"]
            text = f"backends accepting these inputs: {', '.join(ok) or 'none'}"
            if refused and device.type == "cuda":
                text += f"; refused: {', '.join(refused)}"
            notes.append(text)
    return notes


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_sweep(config: MeasureConfig, seq_lens: list[int], batches: list[int],
              progress: Progress | None = None) -> MeasureResult:
    """`run` over every (seq_len, batch), ceilings measured once for all points.

    Every point passes the memory guard before anything is measured, so a sweep
    is refused up front rather than after minutes of work.
    """
    from dataclasses import replace

    points = [(s, b) for s in seq_lens for b in batches]
    for s, b in points:
        run(replace(config, seq_len=s, batch=b), check_only=True)
    rows: list[dict] = []
    first: MeasureResult | None = None
    for i, (s, b) in enumerate(points):
        def point_progress(desc: str, done: int, total: int, i=i, s=s, b=b) -> None:
            if progress is not None:
                progress(f"[{i + 1}/{len(points)}] seq_len {s} batch {b}: {desc}",
                         i * total + done, len(points) * total)

        result = run(replace(config, seq_len=s, batch=b), point_progress,
                     ceilings=first.ceilings if first else None)
        first = first or result
        rows.extend(result.rows)
    # The sizes that ran (a default batch is resolved per point), in order.
    config_out = {**first.config, "seq_len": list(dict.fromkeys(r["seq_len"] for r in rows)),
                  "batch": list(dict.fromkeys(r["batch"] for r in rows)),
                  "sweep_points": len(points)}
    return MeasureResult(rows=rows, device=first.device, ceilings=first.ceilings, config=config_out)


def _add_speedups(rows: list[dict], heads: int) -> None:
    """speedup_vs_mha: the MHA row's median over this row's, same for predicted.

    A named implementation is paired with the same implementation's MHA row; auto's pick with
    auto's pick for MHA, which may be another implementation (sdpa for MHA, grouped for MQA).
    """
    mha_rows = [r for r in rows if r["kv_heads"] == heads]
    named = {(r["step"], r["impl"]): r for r in mha_rows if r["impl_requested"] != "auto"}
    auto = {r["step"]: r for r in mha_rows if r["auto_pick"]}
    for r in rows:
        base = (auto.get(r["step"]) if r["impl_requested"] == "auto"
                else named.get((r["step"], r["impl"])))
        if base is None:
            continue
        if base["median_s"] and r["median_s"]:
            r["speedup_vs_mha"] = base["median_s"] / r["median_s"]
        if base["predicted_s"] and r["predicted_s"]:
            r["predicted_speedup_vs_mha"] = base["predicted_s"] / r["predicted_s"]
