"""One implementation's row of a `kvcalc measure` group: predicted from the ceilings at
the step's shapes, run once and checked against the float64 reference (a failure is
reported in the row, not timed), then timed in rounds, each next to a fresh reading of
the streamed bandwidths, with notes on what may have skewed the figure.
"""

from __future__ import annotations

import math
import warnings

import torch

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure import impls
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.config import DEFAULTS, MeasureConfig
from kvcalc.measure.guard import Group
from kvcalc.measure.predict import StepPrediction, overlap_flops_per_s, time_terms
from kvcalc.measure.timing import Timing, summarise, time_calls
from kvcalc.ground.units import human_bytes, human_seconds
from kvcalc.speed.roofline import Roofline, roofline


def attention_kind(heads: int, kv_heads: int) -> str:
    return "MHA" if kv_heads == heads else "MQA" if kv_heads == 1 else "GQA"


def row_stamp(meta: dict) -> dict:
    """Where and when rows were measured: every row names them (reports are read row by row)."""
    from datetime import datetime, timezone

    return {"device": meta["name"], "torch_version": meta["torch_version"],
            "cuda_version": meta.get("cuda") or "",
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@record
class GroupBench:
    """What every implementation of one group is measured with: the run's settings, the
    group's allocated slots, the flush before each repetition (None: rotated or not
    flushed), the float64 reference output and the SDPA probe at its kv_heads."""

    group: Group
    config: MeasureConfig
    device: torch.device
    meta: dict
    dtype: str
    seq_len: int
    batch: int
    warmup: int
    iters: int
    ceilings: dict
    slots: list
    flush: object
    scale: float
    reference: torch.Tensor
    sdpa_probe: dict
    say: object = None  # say(impl, what is running): progress within a row

    def tell(self, name: str, what: str) -> None:
        if self.say is not None:
            self.say(name, what)


def measure_impl(name: str, b: GroupBench) -> dict:
    """The row of implementation `name` (see the module docstring)."""
    group, device = b.group, b.device
    blk, pred = group.block, group.pred
    g = blk.heads // blk.kv_heads
    attn = impls.get_impl(name)
    build = impls.attention_call if group.step == "attention" else impls.layer_call
    calls = [build(s, attn, b.scale) for s in b.slots]
    copy_bw = b.ceilings["copy_bytes_per_s"]
    read_bw = b.ceilings.get("read_bytes_per_s") or copy_bw
    mm_flops = b.ceilings["matmul_flops_per_s"]
    # The square-matmul roofline, kept for reference: max(bytes / read, FLOPs / square matmul).
    rl = roofline(pred.bytes, pred.flops, max(1, int(read_bw)), max(1, int(mm_flops)), b.batch)
    b.tell(name, "ceilings at the step's shapes")
    shape = _shape_ceilings(group, name, attn, device, b.dtype, b.seq_len, b.batch, b.meta)
    rounds = max(1, DEFAULTS[device.type].rounds)
    b.tell(name, "streamed ceilings" + (f", round 1/{rounds}" if rounds > 1 else ""))
    round_shapes = [_refreshed(shape, b, attn)]
    row = _blank_row(name, b, read_bw, mm_flops, rl, round_shapes[0])
    b.tell(name, "one call, checked against the float64 reference")
    first = _first_call(name, calls[0], device, row)
    if first is None:
        return row
    out, ops = first
    del first
    info = impls.impl_backend(name, ops)
    row["backend"] = info.backend
    notes = _backend_notes(name, info, g, pred, device, b.sdpa_probe.get(blk.kv_heads))
    err = impls.relative_error(out, b.reference)
    del out
    tol = impls.TOLERANCE[b.dtype]
    row["rel_error"] = err if math.isfinite(err) else None
    if not err < tol:
        shown = "NaN/inf or mismatched output" if not math.isfinite(err) else f"{err:.3g}"
        failed = f"failed correctness vs float64 (rel. error {shown} >= {tol:g}), not timed"
        row["note"] = "; ".join([failed] + notes)
        return row
    row["correct"] = True
    before = terms_mod.host_sample()
    per_round = -(-b.iters // rounds)
    try:
        t = _time_rounds(calls, b, attn, rounds, per_round, round_shapes, name)
        after = terms_mod.host_sample()
    except RuntimeError as e:
        if impls.out_of_memory(e):
            raise
        row["correct"] = True
        row["note"] = "; ".join([f"timing failed: {impls._short(str(e))}"] + notes)
        return row
    if rounds > 1:
        row.update(_prediction(pred, read_bw, terms_mod.median_streams(round_shapes), group.step, g,
                               overlap_flops_per_s(device.type, mm_flops, g)))
        notes.append(f"{rounds} rounds of streamed ceilings then {per_round} repetitions; "
                     "K/V and weight read rates are the rounds' medians")
    row["rounds"] = rounds
    row["kv_stream_cut"] = any(sh.kv_stream_cut for sh in round_shapes)
    if row["kv_stream_cut"]:
        notes.append(f"K/V read rate from a stream cut to a {terms_mod.STREAM_CALL_BUDGET_S:g} s "
                     "call, the LLC flushed before each repetition (the call's per-head cost, "
                     "not its bytes, would have made the full stream take seconds a call)")
    notes += _spread_notes(t, rl)
    notes += _host_load(before, after, device, row)
    notes += _launch_notes(t, name, group.step, device, b.config.cuda_graphs)
    achieved = pred.bytes / t.median_s
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


def _refreshed(shape, b: GroupBench, attn):
    """The streamed bandwidths again, right before a share of this row's timing: the
    host's memory bandwidth drifts (other tenants), so each figure is taken next to
    the repetitions it predicts; the row uses the median over its rounds."""
    group, blk = b.group, b.group.block
    try:
        return terms_mod.refresh_streams(
            shape, group.step, attn, b.device, ceil_mod.torch_dtype(b.dtype), blk.heads,
            blk.kv_heads, blk.head_dim, blk.d_model, b.seq_len, b.batch,
            group.stream_bytes or terms_mod.stream_bytes(b.meta["cache_bytes"]), {},
            cache_bytes=b.meta["cache_bytes"])
    except RuntimeError as e:  # an implementation that refuses these inputs: reported below
        if impls.out_of_memory(e):
            raise
        return shape


def _blank_row(name: str, b: GroupBench, read_bw: float, mm_flops: float, rl: Roofline,
               shape) -> dict:
    """The row before the call: the setting, the prediction, nothing measured yet."""
    group, device = b.group, b.device
    blk, pred = group.block, group.pred
    return {
        "device": b.meta["name"],
        "torch_version": b.meta["torch_version"],
        "dtype": b.dtype,
        "step": group.step,
        "impl": name,
        # "auto" when the row exists only as auto's pick; speed-ups pair auto with auto,
        # whichever implementation won at each K/V-head count.
        "impl_requested": name,
        "auto_pick": False,
        "backend": "",
        "attention": attention_kind(blk.heads, blk.kv_heads),
        "heads": blk.heads,
        "kv_heads": blk.kv_heads,
        "head_dim": blk.head_dim,
        "d_model": blk.d_model,
        "layers": b.config.layers,
        "seq_len": b.seq_len,
        "batch": b.batch,
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
        **_prediction(pred, read_bw, shape, group.step, blk.heads // blk.kv_heads,
                      overlap_flops_per_s(b.device.type, mm_flops, blk.heads // blk.kv_heads)),
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
        "cuda_graphs": bool(b.config.cuda_graphs),
        "rounds": 1,
        # the K/V read rate came from a stream cut to terms.STREAM_CALL_BUDGET_S a call
        "kv_stream_cut": bool(shape.kv_stream_cut),
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


def _first_call(name: str, call, device, row: dict):
    """(output, dispatched ops) of one traced call; None when the implementation refuses
    these inputs, with the reason in `row` (out of memory is raised: run() says so)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out, ops = impls.traced(call)
            sync(device)
        except RuntimeError as e:
            if impls.out_of_memory(e):
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
            return None
    return out, ops


def _time_rounds(calls, b: GroupBench, attn, rounds: int, per_round: int,
                 round_shapes: list, name: str = "") -> Timing:
    """`rounds` shares of the repetitions, each after a fresh reading of the streamed
    bandwidths (appended to `round_shapes`), summarised together."""
    values: list[float] = []
    for r in range(rounds):
        if r:
            b.tell(name, f"streamed ceilings, round {r + 1}/{rounds}")
            round_shapes.append(_refreshed(round_shapes[0], b, attn))
        b.tell(name, f"timing {per_round} repetitions"
               + (f", round {r + 1}/{rounds}" if rounds > 1 else ""))
        t = time_calls(calls, device=b.device, warmup=b.warmup if r == 0 else 1,
                       iters=per_round, flush=b.flush, cuda_graphs=b.config.cuda_graphs)
        values.extend(t.values_s)
    if rounds > 1:
        t = summarise(values, t.timer, t.cuda_graphs, t.host_s_per_call)
    return t


def _spread_notes(t: Timing, rl: Roofline) -> list[str]:
    """Repetitions that spread widely, or a time under the roofline's bound."""
    notes = []
    if t.p10_s > 0 and t.p90_s > 1.5 * t.p10_s:
        notes.append(f"noisy: p90 is {t.p90_s / t.p10_s:.1f}x p10")
    if t.min_s > 0 and t.median_s > 2 * t.min_s:
        notes.append(f"noisy: median is {t.median_s / t.min_s:.1f}x the fastest repetition")
    if t.median_s < 0.95 * rl.time_s:
        notes.append("faster than the roofline bound: the working set was partly cache-resident "
                     "or a ceiling was measured low")
    return notes


def _host_load(before, after, device, row: dict) -> list[str]:
    """The host's load while timing, into `row`'s columns; a note when it was LOADED."""
    others, steal = terms_mod.other_cores(before, after)
    load = terms_mod.load_average()
    loaded = None
    notes = []
    if device.type == "cpu" and others is not None:
        loaded = others > terms_mod.LOADED_CORES or (steal or 0) > terms_mod.LOADED_CORES
        if loaded:
            notes.append(f"LOADED host: other processes kept {others:.2f} cores busy"
                         + (f" and the hypervisor stole {steal:.2f}" if steal else "")
                         + " during timing"
                         + (f" (1-minute load {load:.1f})" if load is not None else ""))
    row.update(cpu_mhz=terms_mod.cpu_mhz() if device.type == "cpu" else None, load_avg_1m=load,
               other_cpu_cores=others, steal_cpu_cores=steal, loaded=loaded)
    return notes


def _launch_notes(t: Timing, name: str, step: str, device, cuda_graphs: bool) -> list[str]:
    notes = []
    if t.host_s_per_call is not None and t.host_s_per_call > t.median_s:
        # The queue fill let the GPU run the calls back to back, so the median is GPU
        # time; a serving loop launching the same way would run at the host's rate.
        notes.append(f"launch-bound: the host took {human_seconds(t.host_s_per_call)} to queue "
                     f"each call, the GPU {human_seconds(t.median_s)} to run it"
                     + ("" if cuda_graphs else "; try --cuda-graphs"))
    if name == "sdpa-flash" and step == "attention" and device.type == "cuda":
        notes.append("bytes_moved omits flash-decoding's split-KV partials (fp32, written and "
                     "read back; their count is the kernel's own heuristic)")
    return notes


def _prediction(pred: StepPrediction, read_bw: float, shape, step: str, group: int,
                overlap: float | None) -> dict:
    """A row's predicted time, split into its terms, from the ceilings in `shape`
    (`overlap`: the GPU's attention compute rate, predict.overlap_flops_per_s)."""
    tt = time_terms(pred, read_bw, shape.attention_flops_per_s, shape.projection_flops_per_s,
                    shape.overhead_s, kv_read_bytes_per_s=shape.kv_read_bytes_per_s,
                    weight_read_bytes_per_s=shape.weight_read_bytes_per_s,
                    group=group, overlap_flops_per_s=overlap)
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
    blk = group.block
    failed: list[str] = []
    for which, fn in dict.fromkeys(((name, attn), ("grouped", impls.attention_grouped))):
        if which in group.shape_ceilings:
            return group.shape_ceilings[which]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shape = terms_mod.shape_ceilings(
                    group.step, fn, device, ceil_mod.torch_dtype(dtype), blk.heads,
                    blk.kv_heads, blk.head_dim, blk.d_model, seq_len, batch, meta["cache_bytes"],
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
