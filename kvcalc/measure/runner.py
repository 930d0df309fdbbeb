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

Steps 2-3 are kvcalc.measure.guard; one implementation's row is kvcalc.measure.impl_row.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable

import torch

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure import impls
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.config import ALL_IMPLS, AUTO_CANDIDATES, DEFAULTS, MeasureConfig, MeasureResult, Progress
from kvcalc.measure.guard import (PROBE_SEQ_LEN, Group, MemoryRoom, ceiling_need, default_batch,
                                  fit_sizes, limit_words, plan_groups, probe_bytes)
from kvcalc.measure.impl_row import GroupBench, attention_kind, measure_impl, row_stamp, sync
from kvcalc.measure.predict import block
from kvcalc.ground.units import human_bytes, human_seconds
from kvcalc.ground.dtypes import MAX_WIDTH


def run(config: MeasureConfig, progress: Progress | None = None,
        ceiling_buffer_bytes: int | None = None, ceilings: dict | None = None,
        check_only: bool = False, notice: Callable[[str], None] | None = None
        ) -> MeasureResult | None:
    """Measure; see the module docstring. `progress(description, done, total)` is told
    of each phase, and of what runs within one (`done` unchanged; `total` 0 while the
    phases are not counted yet). `notice(text)` is told at once of what the user should
    know before the results (a dtype this device cannot time well); the result's notes
    carry it too. `ceiling_buffer_bytes` shrinks the ceiling buffers (tests only).
    `ceilings` reuses ones measured earlier in the same process (a sweep);
    `check_only` stops after the memory guard, before anything large is allocated.

    An allocation that fails anyway (memory taken by another process meanwhile, a limit
    the guard could not see) is refused in a KvcalcError, never a torch traceback."""
    state = {"kind": "cpu", "phase": "preparing", "planned": None, "usable": None}
    try:
        return _run(config, progress, ceiling_buffer_bytes, ceilings, check_only, state, notice)
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise ParameterError(_oom_message(e, state), "seq_len", "batch") from None


def _oom_message(e: BaseException, state: dict) -> str:
    """The failed allocation in words, a ParameterError's template ({seq_len}, {batch})."""
    kind = state["kind"]
    msg = f"out of {kind} memory while {state['phase']} ({impls.allocation_failure(e)})"
    if state["planned"] is not None:
        msg += (f"; the memory guard planned a peak of {human_bytes(state['planned'])} of "
                f"{human_bytes(state['usable'])} usable")
    words = limit_words(kind)
    return literal(msg + (f" under {words}" if words else "")) + (
        "; try a smaller {seq_len} or {batch}, or free some memory")


@record
class _Setting:
    """What one run measures with, resolved from the config and the device's defaults."""

    config: MeasureConfig
    device: torch.device
    meta: dict
    dtype: str
    tdtype: torch.dtype
    warmup: int
    iters: int
    room: MemoryRoom

    @property
    def kind(self) -> str:
        return self.device.type


def _setting(config: MeasureConfig, ceiling_buffer_bytes: int | None, state: dict) -> _Setting:
    """The device, dtype and repetitions (device defaults where the user gave none), the
    shapes validated, and the free memory; nothing allocated yet."""
    device = ceil_mod.resolve_device(config.device)
    meta = ceil_mod.device_info(device)
    kind = device.type
    state["kind"] = kind
    if config.cuda_graphs and kind != "cuda":
        raise ParameterError("{cuda_graphs} needs a CUDA device (this run is on the cpu)",
                             "cuda_graphs")
    defaults = DEFAULTS[kind]
    dtype = config.dtype or defaults.dtype
    tdtype = ceil_mod.torch_dtype(dtype)
    warmup = defaults.warmup if config.warmup is None else config.warmup
    iters = config.iters or defaults.iters
    if config.d_model is None and config.heads * config.head_dim > MAX_WIDTH:
        raise ParameterError(f"{{heads}} x {{head_dim}} = {config.heads * config.head_dim:,} is "
                             f"absurdly large (limit {MAX_WIDTH:,})", "heads", "head_dim")
    for kv in config.kv_variants():
        block(config.heads, kv, config.head_dim, config.d_model)
    free = ceil_mod.free_bytes(device)
    usable = int(free * config.memory_fraction)
    state["usable"] = usable
    return _Setting(config, device, meta, dtype, tdtype, warmup, iters,
                    MemoryRoom(free, usable, kind, meta, ceiling_buffer_bytes))


def _probe(s: _Setting, probe_seq_len: int, kv: int) -> dict[str, str]:
    """Which SDPA backends accept these inputs at `kv` K/V heads (a probe of
    `probe_seq_len` tokens), refused when even the probe does not fit."""
    config = s.config
    probe_need = probe_bytes(config.heads, max(config.kv_variants()), config.head_dim,
                             probe_seq_len, s.dtype)
    if probe_need > s.room.usable:
        raise ParameterError(literal(
            f"even a {probe_seq_len}-token SDPA probe needs {human_bytes(probe_need)} but "
            f"{human_bytes(s.room.usable)} of {s.kind} memory is usable; try a smaller ")
            + "{heads} or {head_dim}", "heads", "head_dim")
    return impls.probe_sdpa(s.device, s.tdtype, config.heads, kv, config.head_dim, probe_seq_len)


def _impl_names(config: MeasureConfig, kind: str) -> list[str]:
    """The implementations asked for, "all" expanded for this device, each once."""
    names: list[str] = []
    for n in config.impl_names():
        if n == "all":
            names.extend(ALL_IMPLS[kind])
        else:
            names.append(n)
    return list(dict.fromkeys(names))


class _Ticks:
    """Progress: one tick per phase done, of `total`; `say` tells what runs meanwhile."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, msg: str) -> None:
        self.done += 1
        self.say(msg)

    def say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg, self.done, self.total)


def _run(config: MeasureConfig, progress: Progress | None, ceiling_buffer_bytes: int | None,
         ceilings: dict | None, check_only: bool, state: dict,
         notice: Callable[[str], None] | None = None) -> MeasureResult | None:
    say = _Ticks(progress, 0).say  # phases not counted yet
    s = _setting(config, ceiling_buffer_bytes, state)
    kind, dtype, room = s.kind, s.dtype, s.room
    say(f"sizing the run on {kind}")
    run_notes: list[str] = []
    seq_len = config.seq_len or DEFAULTS[kind].seq_len
    state["phase"] = "probing SDPA's backends"
    probe_seq_len = min(PROBE_SEQ_LEN, seq_len)

    names = _impl_names(config, kind)
    concrete = [n for n in names if n != "auto"]
    batch = config.batch or default_batch(config, seq_len, dtype, kind)
    sized = (seq_len, batch)

    # A request that cannot fit even with the leanest candidates and no K/V copies is
    # refused before any SDPA probe allocates anything.
    lean = concrete + ([c for c in AUTO_CANDIDATES[kind] if c != "sdpa-flash"] if "auto" in names else [])
    seq_len, batch = fit_sizes(config, dtype, room, list(dict.fromkeys(lean)), {}, seq_len, batch)

    auto_pick, auto_reason = _auto_choice(s, probe_seq_len) if "auto" in names else ("", "")
    auto_candidates = [c for c in AUTO_CANDIDATES[kind] if c != "sdpa-flash" or auto_pick == c]
    concrete_for_memory = list(dict.fromkeys(concrete + (auto_candidates if "auto" in names else [])))

    # Does the unpinned SDPA call copy K/V on this device and dtype? (tiny probe)
    sdpa_probe: dict[int, dict[str, str]] = {}
    if "sdpa" in concrete_for_memory:
        say("probing SDPA's backends")
        for kv in config.kv_variants():
            sdpa_probe[kv] = _probe(s, probe_seq_len, kv)
    sdpa_copies = {kv: p.get("kv_copied") == "yes" for kv, p in sdpa_probe.items()}

    # --- the memory guard, with what the probes found ---
    seq_len, batch = fit_sizes(config, dtype, room, concrete_for_memory, sdpa_copies, seq_len, batch)
    if (seq_len, batch) != sized:
        run_notes.append(f"default sizes reduced to fit free memory: seq_len {seq_len}, batch {batch}")
    ceiling_ws = ceiling_need(room, dtype)
    if check_only:
        return None
    groups = _groups(s, seq_len, batch, names, concrete_for_memory, sdpa_copies)
    state["planned"] = max([ceiling_ws] + [g.needed_bytes for g in groups])

    tick = _Ticks(progress, 1 + sum(1 + len(g.impls) for g in groups))
    # Before anything slow: a dtype the device emulates is said at once, not after minutes.
    state["phase"] = f"checking {dtype} on this {kind}"
    check = None
    if dtype != "fp32":  # fp32 is what the others are judged by
        tick.say(f"checking {dtype} arithmetic on this {kind}")
        check = ceil_mod.dtype_check(s.device, dtype)
        if check["notice"]:
            run_notes.append(check["notice"])
            if notice is not None:
                notice(check["notice"])
    state["phase"] = "measuring the bandwidth ceilings"
    if ceilings is None:
        tick.say(f"measuring {kind} ceilings: copy, read and a {dtype} matmul")
        ceilings = ceil_mod.get_ceilings(s.device, s.meta, dtype, config.ceilings_cache,
                                         ceiling_buffer_bytes,
                                         time_budget=bool(check and check["slow"]))
    tick("ceilings ready")
    rows = _measure_groups(s, groups, seq_len, batch, ceilings, auto_candidates, auto_reason,
                           sdpa_probe, tick, state)
    if config.compare:
        _add_speedups(rows, config.heads)
    return _result(s, rows, groups, ceilings, seq_len, batch, names,
                   auto_candidates if "auto" in names else None, run_notes, check)


def _groups(s: _Setting, seq_len: int, batch: int, names: list[str], for_memory: list[str],
            sdpa_copies: dict[int, bool]) -> list[Group]:
    """The groups to measure, planned at the sizes that fit, each with its streamed
    ceilings' size and the streams shared by the run's groups."""
    cache_bytes = s.meta["cache_bytes"]
    buffer = s.room.buffer
    groups = plan_groups(s.config, seq_len, batch, s.dtype, for_memory, s.meta, sdpa_copies, buffer)
    streamed: dict = {}
    for g in groups:
        g.impls = names
        # The streamed ceilings read what this group's timing rotates over (flushed: 8x LLC).
        g.stream_bytes = buffer or terms_mod.stream_bytes(
            cache_bytes, 8 * cache_bytes if g.flush_bytes
            else g.slots * (g.pred.kv_cache_bytes + g.pred.weight_bytes))
        g.streamed = streamed
    return groups


def _measure_groups(s: _Setting, groups: list[Group], seq_len: int, batch: int, ceilings: dict,
                    auto_candidates: list[str], auto_reason: str, sdpa_probe: dict, tick,
                    state: dict) -> list[dict]:
    """Every group's rows, in the groups' order.

    --compare puts every variant through one implementation, so a speed-up compares K/V
    traffic, not two kernels: auto races at the given kv_heads first, and its pick then
    runs MHA and MQA too."""
    config = s.config
    by_group: dict[int, list[dict]] = {}
    order = sorted(range(len(groups)), key=lambda i: (
        config.steps().index(groups[i].step), groups[i].kv_heads != config.kv_heads))
    picks: dict[str, str] = {}
    for i in order:
        group = groups[i]
        cands, reason = auto_candidates, auto_reason
        if config.compare and "auto" in group.impls and group.step in picks:
            cands = [picks[group.step]]
            reason = (f"--compare: auto's pick at kv_heads={config.kv_heads} for every variant"
                      + (f"; {auto_reason}" if auto_reason else ""))
        state["phase"] = f"measuring the {group.step} step at kv_heads={group.kv_heads}"
        by_group[i] = _run_group(group, s, seq_len, batch, ceilings, cands, reason, sdpa_probe,
                                 tick)
        for r in by_group[i]:
            if r["auto_pick"] and group.kv_heads == config.kv_heads:
                picks[group.step] = r["impl"]
    return [r for i in range(len(groups)) for r in by_group[i]]


def _result(s: _Setting, rows: list[dict], groups: list[Group], ceilings: dict, seq_len: int,
            batch: int, names: list[str], auto_candidates: list[str] | None,
            run_notes: list[str], dtype_check: dict | None = None) -> MeasureResult:
    """The rows, each stamped with where and when it was measured (reports are read row
    by row), and the configuration as it resolved."""
    config, meta = s.config, s.meta
    stamp = row_stamp(meta)
    rows = [{**stamp, **r} for r in rows]
    resolved = {
        **{k: v for k, v in asdict(config).items() if k != "ceilings_cache"},
        "ceilings_cache": str(config.ceilings_cache) if config.ceilings_cache else None,
        "seq_len": seq_len, "batch": batch, "dtype": s.dtype, "warmup": s.warmup, "iters": s.iters,
        "d_model": groups[0].block.d_model,
        "device_resolved": s.kind, "impls": names,
        "auto_candidates": auto_candidates,
        "free_memory_bytes": s.room.free, "peak_planned_bytes": max(g.needed_bytes for g in groups),
        "notes": run_notes,
        # fp16/bf16 only: small-matmul rates beside fp32's, and whether the device emulates it
        "dtype_check": dtype_check,
    }
    return MeasureResult(rows=rows, device=meta, ceilings=ceilings, config=resolved)


def _auto_choice(s: _Setting, probe_seq_len: int) -> tuple[str, str]:
    """Whether the fused flash path is among auto's candidates on this device and dtype.

    auto then times every candidate (AUTO_CANDIDATES) that passes the correctness
    check and keeps the fastest: "fastest correct" is measured, not assumed.
    """
    if s.kind != "cuda":
        return "", ""
    result = _probe(s, probe_seq_len, s.config.kv_heads)
    if result.get("flash") == "ok":
        return "sdpa-flash", ""
    return "", f"flash refused ({result.get('flash')})"


def _run_group(group: Group, s: _Setting, seq_len: int, batch: int, ceilings: dict,
               auto_candidates: list[str], auto_reason: str, sdpa_probe: dict, tick) -> list[dict]:
    """One group's rows: its buffers allocated and checked, each implementation measured,
    the buffers freed."""
    blk, pred = group.block, group.pred
    where = f"{group.step} kv_heads={blk.kv_heads}"
    tick.say(f"{where}: allocating {group.slots} x {human_bytes(pred.kv_cache_bytes)} and the "
             "float64 reference")
    bench = _bench(group, s, seq_len, batch, ceilings, sdpa_probe,
                   lambda name, what: tick.say(f"{where} {name}: {what}"))
    tick(f"{group.step} {attention_kind(blk.heads, blk.kv_heads)} kv_heads={blk.kv_heads}: "
         f"{group.slots} x {human_bytes(pred.kv_cache_bytes)} allocated")
    rows = []
    measured: dict[str, dict] = {}
    for name in group.impls:
        if name == "auto":
            row = _auto_row(bench, measured, auto_candidates, auto_reason)
            if row is None:  # its pick was asked for by name too: one row is enough
                continue
        else:
            row = measured.get(name) or measure_impl(name, bench)
            measured[name] = row
        rows.append(row)
        tick(f"{group.step} kv_heads={blk.kv_heads} {row['impl']}: "
             + ("ok" if row["median_s"] is not None else "failed"))
    del bench
    if s.device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _bench(group: Group, s: _Setting, seq_len: int, batch: int, ceilings: dict,
           sdpa_probe: dict, say=None) -> GroupBench:
    """The group's slots (K/V caches, queries, weights) allocated and checked against the
    formula's bytes, its flush buffer, and the float64 reference output."""
    blk, pred, device = group.block, group.pred, s.device
    gen = torch.Generator(device=device).manual_seed(s.config.seed * 1000 + group.kv_heads)
    try:
        slots = [impls.make_slot(group.step, device, s.tdtype, batch, seq_len, blk.heads,
                                 blk.kv_heads, blk.head_dim, blk.d_model, gen)
                 for _ in range(group.slots)]
    except (RuntimeError, MemoryError) as e:
        if not impls.out_of_memory(e):
            raise
        raise ParameterError(literal(
            f"out of {device.type} memory allocating {group.slots} x "
            f"{human_bytes(pred.kv_cache_bytes + pred.weight_bytes)} (planned peak "
            f"{human_bytes(group.needed_bytes)}); try a smaller ") + "{seq_len} or {batch}",
            "seq_len", "batch") from None
    # Accounting: the tensors' bytes are the formula's bytes, exactly.
    for slot in slots:
        if slot.cache_bytes() != pred.kv_cache_bytes:
            raise KvcalcError(f"accounting error: allocated K/V is {slot.cache_bytes():,} B but the "
                              f"formula says {pred.kv_cache_bytes:,} B")
        if slot.weight_bytes() != pred.weight_bytes:
            raise KvcalcError(f"accounting error: allocated weights are {slot.weight_bytes():,} B but "
                              f"the formula says {pred.weight_bytes:,} B")
    scale = blk.head_dim ** -0.5
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
        raise ParameterError(literal(
            f"out of {device.type} memory for the flush buffer or the float64 reference "
            f"(planned peak {human_bytes(group.needed_bytes)}); try a smaller ")
            + "{seq_len} or {batch}", "seq_len", "batch") from None
    # Flush by reading, not writing: a written buffer leaves dirty lines whose write-back
    # would land inside the next timed call.
    flush = flush_buf.sum if flush_buf is not None else None
    sync(device)
    return GroupBench(group, s.config, device, s.meta, s.dtype, seq_len, batch, s.warmup,
                      s.iters, ceilings, slots, flush, scale, reference, sdpa_probe, say)


def _auto_row(bench: GroupBench, measured: dict[str, dict], candidates: list[str],
              reason: str) -> dict | None:
    """auto's row: every candidate that passes the correctness check timed, the fastest
    kept (`measured` shares rows with the implementations asked for by name). None when
    the pick is also asked for by name: its row then says it was auto's pick."""
    group, kind = bench.group, bench.device.type
    tried = {c: measured.get(c) or measure_impl(c, bench) for c in candidates}
    measured.update(tried)
    timed = {c: r for c, r in tried.items() if r["correct"] and r["median_s"]}
    if not timed:
        raise KvcalcError("auto: no implementation passed the correctness check: "
                          + "; ".join(f"{c}: {r['note']}" for c, r in tried.items()))
    best = min(timed, key=lambda c: timed[c]["median_s"])
    race = ", ".join(f"{c} {human_seconds(r['median_s'])}" for c, r in timed.items())
    failed = [c for c in tried if c not in timed]
    why = (f"auto on {kind}: {best}, the fastest correct of {race}"
           + (f" ({', '.join(failed)} failed)" if failed else "")
           + (f"; {reason}" if reason else ""))
    if reason.startswith("--compare"):
        why = f"auto on {kind}: {best} ({reason})"
    if best in group.impls:
        timed[best]["auto_pick"] = True
        timed[best]["note"] = "; ".join([why] + ([timed[best]["note"]] if timed[best]["note"] else []))
        return None
    row = dict(timed[best])
    row["note"] = "; ".join([why] + ([row["note"]] if row["note"] else []))
    row["auto_pick"] = True
    row["impl_requested"] = "auto"
    return row


def run_sweep(config: MeasureConfig, seq_lens: list[int], batches: list[int],
              progress: Progress | None = None,
              notice: Callable[[str], None] | None = None) -> MeasureResult:
    """`run` over every (seq_len, batch), ceilings measured once for all points.

    Every point passes the memory guard before anything is measured, so a sweep
    is refused up front rather than after minutes of work. `notice` hears each text once.
    """
    from dataclasses import replace

    told: set[str] = set()

    def notice_once(text: str) -> None:
        if notice is not None and text not in told:
            told.add(text)
            notice(text)

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
                     ceilings=first.ceilings if first else None, notice=notice_once)
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
