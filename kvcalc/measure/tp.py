"""`kvcalc measure --tp N`: the step sharded over N ranks of torch.distributed.

Ranks, collectives and launch are torch.distributed's: N processes from
torch.multiprocessing.spawn (or the ranks torchrun started, read from its
environment), gloo on a CPU, NCCL on CUDA (one GPU per rank). Megatron-style
sharding, as kvcalc's estimate counts it:

- rank r holds query heads [r h/N, (r+1) h/N) and the K/V heads they read: kv/N
  heads when N divides kv, else one head, replicated over the N/kv ranks that share
  it (formulas.kv_heads_per_device); its cache bytes are asserted equal to
  formulas.kv_cache(..., tp=N).bytes_per_device;
- attention step: local heads' attention, then an all-reduce (sum) of the
  (batch, heads x head_dim) output, each rank contributing its heads' columns;
- layer step: column-parallel fused qkv (the rank's q, k, v rows), the cache
  write, attention, the row-parallel output projection, and the all-reduce (sum)
  of its (batch, d_model) partial output: the all-reduce Megatron pays per layer.

Every ceiling is measured inside the ranks, all ranks at once (they share the
host's memory bus and cores): read bandwidth, the step's FLOP/s at the rank's
shapes, per-call overhead, and the backend's all-reduce latency and bus bandwidth
(ring model t = latency + 2(N-1)/N x bytes / bandwidth). A failed or killed rank
ends the run with an error naming it: spawn's join terminates the other ranks, and
every collective has the process group's timeout.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from datetime import timedelta
from typing import Any

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.measure.allreduce import (
    ALLREDUCE_LARGE_BYTES,
    allreduce_buffers,
    allreduce_rates,
    timed as _timed,
)

TIMEOUT_S = 120  # process-group timeout: a rank stuck in a collective fails, never hangs
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun() -> bool:
    return all(v in os.environ for v in TORCHRUN_VARS)


def rank_heads(heads: int, kv_heads: int, tp: int, rank: int) -> tuple[range, range]:
    """(query heads, K/V heads) rank `rank` of `tp` holds. Query head i reads K/V head
    i // (heads / kv_heads), the convention of repeat_interleave and SDPA's enable_gqa."""
    hl = heads // tp
    g = heads // kv_heads
    q = range(rank * hl, (rank + 1) * hl)
    return q, range(q.start // g, (q.stop - 1) // g + 1)


def allreduce_model_s(message_bytes: int, tp: int, latency_s: float,
                      bus_bytes_per_s: float) -> float:
    """Ring all-reduce: latency + 2(N-1)/N x message bytes / bus bandwidth; 0 for one rank."""
    from kvcalc.speed.comm import ring_allreduce_s

    return ring_allreduce_s(message_bytes, tp, bus_bytes_per_s, latency_s)


# --------------------------------------------------------------------------------
# Launch
# --------------------------------------------------------------------------------
def launch(fn, tp: int, args: tuple, timeout_s: float = TIMEOUT_S) -> Any:
    """Run fn(rank, tp, init_method, result_path, timeout_s, *args) on `tp` spawned ranks;
    return what rank 0 wrote to result_path (JSON). A rank that raises or dies is a
    KvcalcError naming it (torch.multiprocessing.spawn terminates the others)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="kvcalc-tp-") as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        result_path = os.path.join(tmp, "result.json")
        try:
            mp.spawn(fn, args=(tp, init, result_path, timeout_s) + tuple(args), nprocs=tp,
                     join=True)
        except mp.ProcessRaisedException as e:
            raise ParameterError("{tp} " + literal(f"{tp}: rank {e.error_index} failed: "
                                                   f"{_last_line(str(e))}"), "tp") from None
        except mp.ProcessExitedException as e:
            how = (f"was killed by signal {e.signal_name}" if getattr(e, "signal_name", None)
                   else f"exited with code {e.exit_code}")
            raise ParameterError("{tp} " + literal(f"{tp}: rank {e.error_index} {how}"),
                                 "tp") from None
        try:
            with open(result_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            raise ParameterError(f"{{tp}} {tp}: rank 0 ended without a result", "tp") from None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else text
    for prefix in ("kvcalc.errors.KvcalcError: ", "KvcalcError: "):
        if last.startswith(prefix):
            return last[len(prefix):]
    return last


def _init(rank: int, tp: int, init_method: str, timeout_s: float, device_type: str):
    import torch
    import torch.distributed as dist

    if device_type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // tp))
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=tp,
                            timeout=timedelta(seconds=timeout_s))
    return device, backend


# --------------------------------------------------------------------------------
# One rank
# --------------------------------------------------------------------------------
def rank_main(rank: int, tp: int, init_method: str, result_path: str | None, timeout_s: float,
              job: dict) -> list | None:
    """A rank's whole life: join the group, measure, gather to rank 0, leave. Rank 0
    returns every rank's result (and writes it to result_path when given)."""
    import torch.distributed as dist

    device, backend = _init(rank, tp, init_method, timeout_s, job["device_type"])
    try:
        mine = _rank_work(rank, tp, device, backend, job)
        everyone = [None] * tp if rank == 0 else None
        dist.gather_object(mine, everyone, dst=0)
        if rank == 0 and result_path is not None:
            tmp = result_path + ".part"
            with open(tmp, "w") as f:
                json.dump(everyone, f)
            os.replace(tmp, result_path)
        return everyone
    finally:
        dist.destroy_process_group()


def _gen(device, seed: int):
    import torch

    return torch.Generator(device=device).manual_seed(seed)


def _head_tensor(device, tdtype, seed: int, *shape, std: float = 1.0):
    """One head's slice, from its own seed: every rank builds the same values for a head,
    and rank 0 the whole tensor for the reference, without any rank holding the rest."""
    import torch

    return torch.empty(shape, device=device, dtype=tdtype).normal_(0.0, std,
                                                                   generator=_gen(device, seed))


def build_slot(step: str, device, tdtype, job: dict, q_heads: range, kv_heads: range):
    """Buffers for these heads (rank's shard, or all heads for the reference)."""
    import torch

    from kvcalc.measure.impls import Slot

    b, L, d, dm, seed = job["batch"], job["seq_len"], job["head_dim"], job["d_model"], job["seed"]
    base = seed * 1_000_003
    k = torch.stack([_head_tensor(device, tdtype, base + 2 * j, b, L, d) for j in kv_heads], 1)
    v = torch.stack([_head_tensor(device, tdtype, base + 2 * j + 1, b, L, d) for j in kv_heads], 1)
    if step == "attention":
        q = torch.stack([_head_tensor(device, tdtype, base + 500_000 + i, b, 1, d)
                         for i in q_heads], 1)
        return Slot(k=k.contiguous(), v=v.contiguous(), q=q.contiguous())
    x = _head_tensor(device, tdtype, base + 999_999, b, dm)
    std_in, std_o = dm ** -0.5, (job["heads"] * d) ** -0.5
    rows = ([_head_tensor(device, tdtype, base + 600_000 + i, d, dm, std=std_in) for i in q_heads]
            + [_head_tensor(device, tdtype, base + 700_000 + j, d, dm, std=std_in) for j in kv_heads]
            + [_head_tensor(device, tdtype, base + 800_000 + j, d, dm, std=std_in) for j in kv_heads])
    w_o = torch.cat([_head_tensor(device, tdtype, base + 900_000 + i, dm, d, std=std_o)
                     for i in q_heads], 1)
    return Slot(k=k.contiguous(), v=v.contiguous(), x=x, w_qkv=torch.cat(rows, 0).contiguous(),
                w_o=w_o.contiguous())


def _rank_work(rank: int, tp: int, device, backend: str, job: dict) -> dict:
    import torch
    import torch.distributed as dist

    from kvcalc.formulas.cache import as_dtype
    from kvcalc.measure import ceilings as ceil_mod
    from kvcalc.measure import impls
    from kvcalc.measure import terms as terms_mod
    from kvcalc.measure.predict import block, predict, time_terms
    from kvcalc.measure.timing import summarise

    step, dtype = job["step"], job["dtype"]
    tdtype = ceil_mod.torch_dtype(dtype)
    heads, kv, d, dm = job["heads"], job["kv_heads"], job["head_dim"], job["d_model"]
    b, L = job["batch"], job["seq_len"]
    q_heads, kv_heads = rank_heads(heads, kv, tp, rank)
    full = block(heads, kv, d, dm).attention
    local = block(len(q_heads), len(kv_heads), d, dm)
    pred = predict(step, local, b, L, dtype)
    # Three independent counts of the bytes this rank holds must agree: the layer kind's
    # TP accounting, a one-rank block of the shard, and (below) the allocated tensors.
    per_device = b * L * full.token_bytes(as_dtype(dtype), tp)
    if len(kv_heads) != full.kv_heads_per_device(tp) or pred.kv_cache_bytes != per_device:
        raise KvcalcError(f"rank {rank}: holds {len(kv_heads)} K/V heads "
                          f"({pred.kv_cache_bytes:,} B) but the layer at tp={tp} counts "
                          f"{full.kv_heads_per_device(tp)} ({per_device:,} B)")

    attn = impls.get_impl(job["impl"])
    slots = [build_slot(step, device, tdtype, job, q_heads, kv_heads) for _ in range(job["slots"])]
    for s in slots:
        if s.cache_bytes() != per_device or s.weight_bytes() != pred.weight_bytes:
            raise KvcalcError(f"rank {rank}: allocated K/V {s.cache_bytes():,} B and weights "
                              f"{s.weight_bytes():,} B, but the formulas say {per_device:,} B "
                              f"and {pred.weight_bytes:,} B")
    scale = d ** -0.5
    hl = len(q_heads)
    msg_elems = b * (heads * d if step == "attention" else dm)
    out = torch.empty(b, msg_elems // b, device=device, dtype=tdtype)

    def make_call(slot):
        if step == "attention":
            def local_part():
                o = attn(slot.q, slot.k, slot.v, scale)  # (b, hl, 1, d)
                out.zero_()
                out[:, q_heads.start * d:q_heads.stop * d] = o.reshape(b, hl * d)
                return out
        else:
            layer = impls.layer_call(slot, attn, scale)

            def local_part():
                out.copy_(layer())  # the row-parallel projection's partial sum
                return out
        return local_part

    calls = [make_call(s) for s in slots]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # --- correctness: the all-reduced output against float64 on rank 0 ---
    result = calls[0]()
    dist.all_reduce(result)
    sync()
    verdict = [None]
    if rank == 0:
        ref_slot = build_slot(step, device, tdtype, job, range(heads), range(kv))
        if step == "attention":
            ref = impls.reference_attention(ref_slot.q, ref_slot.k, ref_slot.v, scale)
            got = result.reshape(b, heads, 1, d)
        else:
            # the reference writes the new token's K/V into its own copy: same as the shards
            ref = impls.reference_layer(ref_slot, scale)
            got = result
        err = impls.relative_error(got, ref)
        del ref_slot, ref
        verdict = [err]
    dist.broadcast_object_list(verdict, src=0)
    err = verdict[0]
    tol = impls.TOLERANCE[dtype]
    if not err < tol:
        raise KvcalcError(f"the all-reduced output differs from float64 (relative error "
                          f"{err:.3g} >= {tol:g})")

    # --- ceilings, every rank at once ---
    dist.barrier()
    read_buf = torch.ones(job["read_bytes"] // 4, device=device, dtype=torch.float32)
    read_t = _timed(lambda: read_buf.sum(), device, 3, 20, barrier=True)
    read_bw = read_buf.numel() * 4 / statistics.median(read_t)
    del read_buf
    dist.barrier()
    shape = terms_mod.shape_ceilings(step, attn, device, tdtype, hl, len(kv_heads), d, dm, L, b,
                                     job["cache_bytes"], job["stream_bytes"],
                                     lockstep=dist.barrier)
    small, large = allreduce_buffers(device, tdtype)
    large_bytes = large.numel() * large.element_size()

    def allreduce_probe() -> tuple[float, float]:
        return allreduce_rates(small, large, tp, device)

    def refreshed():
        """The streamed bandwidths again, every rank at once, next to the repetitions
        they predict (the host's bandwidth drifts; as the one-rank runner does)."""
        dist.barrier()
        return terms_mod.refresh_streams(shape, step, attn, device, tdtype, hl, len(kv_heads),
                                         d, dm, L, b, job["stream_bytes"], {},
                                         lockstep=dist.barrier, cache_bytes=job["cache_bytes"])

    # --- the timed step, in rounds: (ceilings, a share of the repetitions) each ---
    rounds = max(1, job.get("rounds", 1))
    warmup, iters = job["warmup"], job["iters"]
    per_round = -(-iters // rounds)
    shapes, probes = [shape], [allreduce_probe()]
    steps, reduces, locals_, arrive, done = [], [], [], [], []
    n = len(calls)
    calls_made = 0
    before = terms_mod.host_sample()
    for r in range(rounds):
        if r:
            shapes.append(refreshed())
            probes.append(allreduce_probe())
        skip = warmup if r == 0 else 1
        for i in range(skip + per_round):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            res = calls[calls_made % n]()
            calls_made += 1
            sync()
            t1 = time.perf_counter()
            if tp > 1:  # one rank has nothing to reduce
                dist.all_reduce(res)
                sync()
            t2 = time.perf_counter()
            if i >= skip:
                steps.append(t2 - t0)
                reduces.append(t2 - t1)
                locals_.append(t1 - t0)
                arrive.append(t1)  # perf_counter is CLOCK_MONOTONIC: one clock for every rank
                done.append(t2)
    del small, large
    shape = terms_mod.median_streams(shapes)
    lat = statistics.median(p[0] for p in probes)
    bus_bw = statistics.median(p[1] for p in probes)
    after = terms_mod.host_sample()
    host = None
    if before is not None and after is not None:
        host = {"wall_s": after.wall_s - before.wall_s,
                "busy_ticks": after.busy_ticks - before.busy_ticks,
                "steal_ticks": after.steal_ticks - before.steal_ticks,
                "self_ticks": after.self_ticks - before.self_ticks}
    message_bytes = out.numel() * out.element_size()
    ar_model = allreduce_model_s(message_bytes, tp, lat, bus_bw) if tp > 1 else 0.0
    tt = time_terms(pred, read_bw, shape.attention_flops_per_s, shape.projection_flops_per_s,
                    shape.overhead_s, ar_model, kv_read_bytes_per_s=shape.kv_read_bytes_per_s,
                    weight_read_bytes_per_s=shape.weight_read_bytes_per_s,
                    group=hl // len(kv_heads))
    st, rt = summarise(steps, "perf_counter"), summarise(reduces, "perf_counter")
    return {
        "rank": rank, "backend": backend, "threads": torch.get_num_threads()
        if device.type == "cpu" else None,
        "q_heads": [q_heads.start, q_heads.stop], "kv_heads_held": len(kv_heads),
        "kv_head_range": [kv_heads.start, kv_heads.stop],
        "kv_bytes_held": slots[0].cache_bytes(), "kv_bytes_per_device_formula": per_device,
        "weight_bytes_held": slots[0].weight_bytes(), "bytes_moved": pred.bytes,
        "flops": pred.flops, "rel_error": err,
        "median_s": st.median_s, "p10_s": st.p10_s, "p90_s": st.p90_s, "min_s": st.min_s,
        "iters": st.samples, "steps_s": steps, "locals_s": locals_, "reduces_s": reduces,
        "arrive_s": arrive, "done_s": done,
        "allreduce_median_s": rt.median_s, "allreduce_bytes": message_bytes,
        "allreduce_predicted_s": ar_model,
        "allreduce_latency_s": lat, "allreduce_bus_bytes_per_s": bus_bw,
        "allreduce_probe_bytes": large_bytes,
        "read_bytes_per_s": read_bw, "shape": shape.__dict__, "terms": tt.as_dict(),
        "predicted_s": tt.total_s, "bound": tt.bound,
        "host": host,
    }


# --------------------------------------------------------------------------------
# The run: plan, guard, launch, rows
# --------------------------------------------------------------------------------
def run_tp(config, progress=None, notice=None):
    """`kvcalc measure --tp N[,M...]`: one set of rows per tp degree (one row per rank).
    `notice(text)` hears at once of a dtype this device emulates (rank 0 only).

    Returns a MeasureResult; under torchrun, ranks other than 0 return None."""
    import torch

    from kvcalc.measure import ceilings as ceil_mod
    from kvcalc.measure import terms as terms_mod
    from kvcalc.measure.config import DEFAULTS, MeasureResult
    from kvcalc.measure.predict import block, predict
    from kvcalc.measure.guard import default_batch, l2_plan
    from kvcalc.measure.impl_row import attention_kind, row_stamp
    from kvcalc.ground.units import human_bytes

    tps = list(config.tp)
    if config.step == "both":
        raise ParameterError("{tp} times one step: give {step} attention or {step} layer",
                             "tp", "step")
    if config.compare:
        raise ParameterError("{tp} runs one K/V-head count: drop {compare} (run it once per "
                             "{kv_heads})", "tp", "compare", "kv_heads")
    if config.cuda_graphs:
        raise ParameterError("{tp} does not capture CUDA graphs: drop {cuda_graphs}", "tp",
                             "cuda_graphs")
    names = config.impl_names()
    if len(names) != 1 or names[0] == "all":
        raise ParameterError("{tp} times one implementation: give {impl} NAME (or auto)",
                             "tp", "impl")
    impl = "grouped" if names[0] == "auto" else names[0]
    device = ceil_mod.resolve_device(config.device)
    kind = device.type
    if kind == "cuda" and max(tps) > torch.cuda.device_count():
        raise ParameterError(f"{{tp}} {max(tps)} needs {max(tps)} GPUs (one per rank); this "
                             f"machine has {torch.cuda.device_count()}", "tp")
    torchrun = launched_by_torchrun()
    if torchrun and (len(tps) != 1 or int(os.environ["WORLD_SIZE"]) != tps[0]):
        raise ParameterError("under torchrun {tp} must equal WORLD_SIZE (" + literal(
            f"{os.environ['WORLD_SIZE']}), got {','.join(map(str, tps))}"), "tp")
    meta = ceil_mod.device_info(device)
    d = DEFAULTS[kind]
    dtype = config.dtype or d.dtype
    warmup = d.warmup if config.warmup is None else config.warmup
    iters = config.iters or d.iters
    seq_len = config.seq_len or d.seq_len
    batch = config.batch or default_batch(config, seq_len, dtype, kind)
    blk = block(config.heads, config.kv_heads, config.head_dim, config.d_model)
    e = ceil_mod.torch_dtype(dtype).itemsize
    free = ceil_mod.free_bytes(device)
    usable = int(free * config.memory_fraction)
    notes: list[str] = []
    check = None
    if dtype != "fp32" and (not torchrun or int(os.environ.get("RANK", "0")) == 0):
        if progress is not None:
            progress(f"checking {dtype} arithmetic on this {kind}", 0, len(tps))
        check = ceil_mod.dtype_check(device, dtype)
        if check["notice"]:
            notes.append(check["notice"])
    told = False  # the notice is said before the first ranks start, after the checks
    rows: list[dict] = []
    for tp in tps:
        if config.heads % tp:
            raise ParameterError(f"{{tp}} {tp} must divide {{heads}} ({config.heads})", "tp",
                                 "heads")
        if config.kv_heads % tp and tp % config.kv_heads:
            raise ParameterError(f"{{tp}} {tp} and {{kv_heads}} {config.kv_heads}: one must "
                                 "divide the other (K/V heads are split, or replicated "
                                 "tp/kv_heads times)", "tp", "kv_heads")
        kv_dev = blk.attention.kv_heads_per_device(tp)
        for r in range(tp):
            q, kvr = rank_heads(config.heads, config.kv_heads, tp, r)
            if len(kvr) != kv_dev or (len(q) % len(kvr)):
                raise ParameterError(f"rank {r} of {{tp}} {tp} would read {len(kvr)} K/V "
                                     f"heads, the formulas count {kv_dev}", "tp")
        local = block(config.heads // tp, kv_dev, config.head_dim, blk.d_model)
        pred = predict(config.step, local, batch, seq_len, dtype)
        full = predict(config.step, blk, batch, seq_len, dtype)
        slot_bytes = pred.kv_cache_bytes + pred.weight_bytes
        # The ranks share the host's last-level cache on a CPU; on CUDA each has its own L2.
        shared = tp if kind == "cpu" else 1
        mode = "rotate" if config.l2 in ("auto", "flush") else config.l2
        slots, _, regime = l2_plan(slot_bytes * shared, meta["cache_bytes"], meta["cache_name"],
                                   mode, "cache" if config.step == "attention" else "layer")
        read_bytes = ceil_mod.CEILING_BYTES[kind] // (tp if kind == "cpu" else 1)
        stream = terms_mod.stream_bytes(meta["cache_bytes"], slots * slot_bytes)
        per_rank = (slots * slot_bytes + max(read_bytes, stream + 2**22, 2 * meta["cache_bytes"])
                    + 2 * ALLREDUCE_LARGE_BYTES + 16 * batch * config.heads * seq_len)
        # rank 0 also builds the whole problem for the float64 reference
        reference = (full.kv_cache_bytes + full.weight_bytes) * (1 + 8 // e)
        need = (shared * per_rank if kind == "cpu" else per_rank) + reference
        if need > usable:
            raise ParameterError(f"{{tp}} {tp} needs {human_bytes(need)} but "
                                 f"{human_bytes(usable)} of {kind} memory is usable; try a "
                                 "smaller {seq_len} or {batch}", "tp", "seq_len", "batch")
        job = {"device_type": kind, "step": config.step, "dtype": dtype, "impl": impl,
               "heads": config.heads, "kv_heads": config.kv_heads, "head_dim": config.head_dim,
               "d_model": blk.d_model, "batch": batch, "seq_len": seq_len, "seed": config.seed,
               "slots": slots, "warmup": warmup, "iters": iters, "read_bytes": read_bytes,
               "cache_bytes": meta["cache_bytes"],
               "stream_bytes": stream, "rounds": d.rounds}
        if notes and notice is not None and not told:
            notice(notes[0])
            told = True
        if progress is not None:
            progress(f"--tp {tp}: {tp} rank(s), {human_bytes(pred.kv_cache_bytes)} K/V each",
                     tps.index(tp), len(tps))
        if torchrun:
            ranks = rank_main(int(os.environ["RANK"]), tp, "env://", None, TIMEOUT_S, job)
            if ranks is None:
                return None
        else:
            ranks = launch(rank_main, tp, (job,))
        rows.extend(_rows(ranks, tp, job, meta, blk, full, regime, attention_kind(
            config.heads, config.kv_heads)))
    rows = [{**row_stamp(meta), **r} for r in rows]
    base = [r for r in rows if r["tp"] == min(tps)]
    for r in rows:
        b0 = next((x for x in base if x["rank"] == 0), None)
        if b0 and r["step_median_s"]:
            r["speedup_vs_tp_min"] = b0["step_median_s"] / r["step_median_s"]
            r["predicted_speedup_vs_tp_min"] = b0["step_predicted_s"] / r["step_predicted_s"]
    resolved = {"heads": config.heads, "kv_heads": config.kv_heads, "head_dim": config.head_dim,
                "d_model": blk.d_model, "seq_len": seq_len, "batch": batch, "dtype": dtype,
                "step": config.step, "impl": impl, "tp": tps, "warmup": warmup, "iters": iters,
                "launcher": "torchrun" if torchrun else "torch.multiprocessing.spawn",
                "device_resolved": kind, "free_memory_bytes": free, "notes": notes,
                "dtype_check": check}
    return MeasureResult(rows=rows, device=meta, ceilings={"measured": "per rank, see rows"},
                         config=resolved)


def _rows(ranks: list[dict], tp: int, job: dict, meta: dict, blk, full, regime: str,
          attention: str) -> list[dict]:
    from kvcalc.measure import terms as terms_mod

    # The step ends when its slowest rank does: per repetition the max over ranks.
    per_rep = [max(r["steps_s"][i] for r in ranks) for i in range(len(ranks[0]["steps_s"]))]
    step_median = statistics.median(per_rep)
    step_pred = max(r["predicted_s"] for r in ranks)
    # An all-reduce starts when the last rank arrives. The ranks share one monotonic clock
    # (perf_counter on one host), so rank r waits max_j(arrive_j) - arrive_r, and the
    # collective itself runs from the last arrival to rank r's return.
    reps = range(len(ranks[0]["locals_s"]))
    last = [max(r["arrive_s"][i] for r in ranks) for i in reps]
    for r in ranks:
        r["wait_median_s"] = statistics.median(last[i] - r["arrive_s"][i] for i in reps)
        r["transfer_median_s"] = statistics.median(
            max(0.0, r["done_s"][i] - last[i]) for i in reps)
        r["local_median_s"] = statistics.median(r["locals_s"])
    load, mhz = terms_mod.load_average(), terms_mod.cpu_mhz()
    # Other processes: the host's busy CPU time during rank 0's timed loop, less every
    # rank's own (the ranks are this run, not a neighbour).
    others = steal = None
    h0 = ranks[0]["host"]
    if h0 and all(r["host"] for r in ranks) and h0["wall_s"] > 0:
        hz = os.sysconf("SC_CLK_TCK")
        ours = sum(r["host"]["self_ticks"] for r in ranks)
        others = max(0.0, (h0["busy_ticks"] - ours) / hz / h0["wall_s"])
        steal = h0["steal_ticks"] / hz / h0["wall_s"]
    rows = []
    for r in ranks:
        t = r["terms"]
        loaded = None
        notes = []
        if meta["type"] == "cpu" and others is not None:
            loaded = others > terms_mod.LOADED_CORES or (steal or 0) > terms_mod.LOADED_CORES
            if loaded:
                notes.append(f"LOADED host: other processes kept {others:.2f} cores busy during "
                             "timing")
        if r["kv_heads_held"] * tp > job["kv_heads"]:
            notes.append(f"K/V heads replicated: {tp // job['kv_heads']} ranks hold each head")
        cut = bool(r["shape"].get("kv_stream_cut"))
        if cut:
            notes.append(f"K/V read rate from a stream cut to a "
                         f"{terms_mod.STREAM_CALL_BUDGET_S:g} s call (the same heads on every "
                         "rank), the LLC flushed before each repetition")
        rounds = max(1, job.get("rounds", 1))
        if rounds > 1:
            notes.append(f"{rounds} rounds of streamed ceilings and all-reduce probes, each "
                         f"followed by {-(-job['iters'] // rounds)} repetitions; rates are the "
                         "rounds' medians")
        rows.append({
            "dtype": job["dtype"], "step": job["step"], "impl": job["impl"],
            "backend": r["backend"], "tp": tp, "rank": r["rank"],
            "heads": job["heads"], "attention": attention, "kv_heads": job["kv_heads"],
            "head_dim": job["head_dim"], "d_model": job["d_model"], "seq_len": job["seq_len"],
            "batch": job["batch"], "threads": r["threads"], "rounds": max(1, job.get("rounds", 1)),
            "kv_stream_cut": cut,
            "q_heads": f"{r['q_heads'][0]}-{r['q_heads'][1] - 1}",
            "kv_heads_held": r["kv_heads_held"],
            "kv_heads_range": f"{r['kv_head_range'][0]}-{r['kv_head_range'][1] - 1}",
            "kv_cache_bytes": full.kv_cache_bytes,
            "kv_bytes_held": r["kv_bytes_held"],
            "kv_bytes_per_device_formula": r["kv_bytes_per_device_formula"],
            "weight_bytes_held": r["weight_bytes_held"],
            "bytes_moved": r["bytes_moved"], "flops": r["flops"],
            "correct": True, "rel_error": r["rel_error"],
            "median_s": r["median_s"], "p10_s": r["p10_s"], "p90_s": r["p90_s"],
            "min_s": r["min_s"], "iters": r["iters"],
            "allreduce_median_s": r["allreduce_median_s"],
            "allreduce_wait_median_s": r["wait_median_s"] if tp > 1 else None,
            "allreduce_transfer_median_s": r["transfer_median_s"] if tp > 1 else None,
            "local_median_s": r["local_median_s"],
            "local_predicted_s": r["predicted_s"] - t["allreduce_s"],
            "allreduce_bytes": r["allreduce_bytes"],
            "allreduce_predicted_s": r["allreduce_predicted_s"],
            "allreduce_latency_s": r["allreduce_latency_s"],
            "allreduce_bus_bytes_per_s": r["allreduce_bus_bytes_per_s"],
            "read_bytes_per_s": r["read_bytes_per_s"],
            "kv_read_bytes_per_s": r["shape"]["kv_read_bytes_per_s"],
            "weight_read_bytes_per_s": r["shape"]["weight_read_bytes_per_s"],
            "attention_flops_per_s_at_shape": r["shape"]["attention_flops_per_s"],
            "projection_flops_per_s_at_shape": r["shape"]["projection_flops_per_s"],
            "predicted_kv_s": t["kv_s"], "predicted_weights_s": t["weights_s"],
            "predicted_activations_s": t["activations_s"],
            "predicted_attention_compute_s": t["attention_compute_s"],
            "predicted_extra_compute_s": t["extra_compute_s"],
            "predicted_projection_compute_s": t["projection_compute_s"],
            "predicted_overhead_s": t["overhead_s"], "predicted_allreduce_s": t["allreduce_s"],
            "predicted_s": r["predicted_s"],
            "measured_over_predicted": r["median_s"] / r["predicted_s"],
            "step_median_s": step_median, "step_predicted_s": step_pred,
            "step_measured_over_predicted": step_median / step_pred,
            "speedup_vs_tp_min": None, "predicted_speedup_vs_tp_min": None,
            "bound": r["bound"], "l2_regime": regime, "timer": "perf_counter",
            "cpu_mhz": mhz, "load_avg_1m": load, "other_cpu_cores": others,
            "steal_cpu_cores": steal, "loaded": loaded, "note": "; ".join(notes),
        })
    return rows
