"""`kvcalc measure --calibrate`: measure the terms `estimate`'s calibrated latency uses,
on this device, and write them as a hardware file (`--gpu FILE` takes it).

Terms (spec.Calibration), each the median of timed calls:
- streamed read bandwidth at several buffer sizes, all above the L2/LLC;
- the rate F.linear streams weights at 1..64 input rows (decode's skinny GEMMs), over
  rotated copies far larger than the L2/LLC;
- the rate SDPA streams K/V in a decode call (one query row per K/V head);
- a prompt-sized matmul's FLOP/s;
- the fixed cost of one decode layer and of the rest of a step: wall time of whole
  decode steps of tiny models (kvcalc.measure.model_step) with 2 and 10 layers, the
  host's launches included (that is what a tiny step waits on in eager mode).
The engine is "torch-eager": one torch op per kernel, no CUDA graphs, no fusion.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone

import torch
import torch.nn.functional as F

from kvcalc.measure import ceilings as ceil_mod
from kvcalc.measure.allreduce import allreduce_buffers, allreduce_rates
from kvcalc.measure import impls
from kvcalc.measure import terms as terms_mod
from kvcalc.measure.model_step import decode_call
from kvcalc.measure.timing import time_calls
from kvcalc.spec import Calibration, Hardware, ModelSpec

LINEAR_BATCHES = (1, 2, 4, 16, 64)  # 1 row is a GEMV, 2 already a GEMM on a CPU
# (rows, inner = out) of the prompt-sized matmul, and the linear probe's square weights.
PREFILL_SHAPE = {"cuda": (4096, 8192), "cpu": (512, 2048)}
LINEAR_WIDTHS = {"cuda": (1024, 8192), "cpu": (768, 4096)}  # in_features probed
LINEAR_WEIGHT_BYTES = {"cuda": 64 * 2**20, "cpu": 16 * 2**20}  # one weight matrix
ATTENTION_SEQ_LEN = {"cuda": 8192, "cpu": 2048}
READ_MULTIPLES = (4, 16, 64)  # buffer sizes in units of the L2/LLC
READ_MAX_BYTES = {"cuda": 8 * 2**30, "cpu": 1 * 2**30}
OVERHEAD_LAYERS = (2, 10)
ITERS = {"cuda": (5, 30), "cpu": (2, 9)}  # (warm-up, timed)


def _tiny(layers: int) -> ModelSpec:
    """A model with nothing to move: its step time is the engine's fixed costs."""
    return ModelSpec.uniform(name=f"tiny-{layers}", layers=layers, d_model=64, heads=2,
                             kv_heads=1, head_dim=32, d_ff=128, vocab=256)


def _wall_per_call(fn, device, warmup: int, iters: int, rounds: int = 5) -> float:
    """Median over rounds of (wall time of `iters` calls back to back) / iters, synced."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        per_call.append((time.perf_counter() - t0) / iters)
    return statistics.median(per_call)


def read_rates(device, llc: int, warmup: int, iters: int) -> dict[int, int]:
    out = {}
    for m in READ_MULTIPLES:
        nbytes = min(m * llc, READ_MAX_BYTES[device.type])
        buf = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        t = time_calls([buf.sum], device=device, warmup=warmup, iters=iters)
        out[buf.numel() * 4] = int(buf.numel() * 4 / t.median_s)
        del buf
    return out


def linear_rates(device, tdtype, llc: int, warmup: int, iters: int) -> dict[int, dict[int, int]]:
    """{in_features: {rows: bytes/s}} of F.linear over LINEAR_WEIGHT_BYTES-sized weights
    (out_features = bytes / in_features), rotated over copies 8x the L2/LLC."""
    e = torch.empty((), dtype=tdtype).element_size()
    out: dict[int, dict[int, int]] = {}
    for width in LINEAR_WIDTHS[device.type]:
        n_out = LINEAR_WEIGHT_BYTES[device.type] // (e * width)
        w_bytes = n_out * width * e
        copies = max(2, -(-8 * llc // w_bytes))  # the rotation never finds a copy in cache
        ws = [torch.empty(n_out, width, device=device, dtype=tdtype).normal_(0, width ** -0.5)
              for _ in range(copies)]
        out[width] = {}
        for rows in LINEAR_BATCHES:
            x = torch.randn(rows, width, device=device, dtype=tdtype)
            t = time_calls([lambda w=w: F.linear(x, w) for w in ws], device=device,
                           warmup=max(warmup, copies), iters=max(iters, copies))
            out[width][rows] = int(w_bytes / t.median_s)
        del ws
    return out


def prefill_rate(device, tdtype, warmup: int, iters: int) -> tuple[int, str]:
    rows, n = PREFILL_SHAPE[device.type]
    a = torch.randn(rows, n, device=device, dtype=tdtype)
    w = torch.randn(n, n, device=device, dtype=tdtype)
    t = time_calls([lambda: F.linear(a, w)], device=device, warmup=warmup, iters=iters)
    return int(2 * rows * n * n / t.median_s), f"({rows}x{n}) @ ({n}x{n})"


def overhead_terms(device, tdtype, warmup: int, iters: int) -> tuple[float, float]:
    """(per-layer, rest-of-step) fixed costs from tiny models of 2 and 10 layers."""
    few, many = OVERHEAD_LAYERS
    times = [_wall_per_call(decode_call(_tiny(n), 1, 16, device, tdtype), device,
                            warmup, 4 * iters) for n in (few, many)]
    per_layer = max(0.0, (times[1] - times[0]) / (many - few))
    return per_layer, max(0.0, times[0] - few * per_layer)


def allreduce_rank(rank: int, tp: int, init_method: str, result_path: str | None,
                   timeout_s: float, device_type: str, dtype: str) -> None:
    """One rank of the all-reduce probe (gloo on a CPU, NCCL on GPUs): the latency of a
    one-element all-reduce and the bus bandwidth of an 8 MiB one (ring: 2(N-1)/N x bytes
    over the time beyond the latency), medians over every rank at once."""
    import json
    import os

    import torch.distributed as dist

    from kvcalc.measure import tp as tp_mod

    device, backend = tp_mod._init(rank, tp, init_method, timeout_s, device_type)
    try:
        small, large = allreduce_buffers(device, ceil_mod.torch_dtype(dtype))
        lat, bus = allreduce_rates(small, large, tp, device)
        if rank == 0 and result_path is not None:
            with open(result_path + ".part", "w") as f:
                json.dump({"latency_s": lat, "bus_bytes_per_s": bus, "backend": backend}, f)
            os.replace(result_path + ".part", result_path)
    finally:
        dist.destroy_process_group()


def allreduce_terms(device, dtype: str, tp: int) -> dict:
    from kvcalc.errors import ParameterError
    from kvcalc.measure import tp as tp_mod

    if device.type == "cuda" and torch.cuda.device_count() < tp:
        raise ParameterError(f"{{tp}} {tp} needs {tp} GPUs (one per rank); this machine has "
                             f"{torch.cuda.device_count()}", "tp")
    return tp_mod.launch(allreduce_rank, tp, (device.type, dtype))


def calibrate(device, dtype: str, name: str, command: str, progress=None,
              tp: int = 1) -> Hardware:
    """Measure every term on `device` in `dtype`; a Hardware named `name` holding them.
    With `tp` > 1, also the all-reduce between that many ranks (its latency and bus
    bandwidth become the file's allreduce_latency_s and interconnect bandwidth)."""
    from kvcalc import __version__

    tdtype = ceil_mod.torch_dtype(dtype)
    info = ceil_mod.device_info(device)
    llc = info["cache_bytes"]
    warmup, iters = ITERS[device.type]
    steps = [
        ("read bandwidth", lambda: read_rates(device, llc, warmup, iters)),
        ("F.linear weight streaming", lambda: linear_rates(device, tdtype, llc, warmup, iters)),
        ("SDPA K/V streaming", lambda: terms_mod.kv_stream_bytes_per_s(
            impls.get_impl("sdpa"), device, tdtype, 128, ATTENTION_SEQ_LEN[device.type],
            terms_mod.stream_bytes(llc))[0]),
        ("prompt-sized matmul", lambda: prefill_rate(device, tdtype, warmup, iters)),
        ("fixed costs (tiny models)", lambda: overhead_terms(device, tdtype, warmup, iters)),
    ]
    if tp > 1:
        steps.append((f"all-reduce over {tp} ranks", lambda: allreduce_terms(device, dtype, tp)))
    results = []
    for label, fn in steps:
        if progress is not None:
            progress(label)
        with torch.no_grad():
            results.append(fn())
        if device.type == "cuda":
            torch.cuda.empty_cache()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    reads, linear, kv_rate, (prefill, prefill_shape), (per_layer, per_step) = results[:5]
    comm = {}
    if tp > 1:
        ar = results[5]
        comm = dict(interconnect_bandwidth_bytes_per_s=int(ar["bus_bytes_per_s"]),
                    interconnect=f"measured: {ar['backend']} all-reduce bus bandwidth, {tp} ranks",
                    allreduce_latency_s=float(ar["latency_s"]),
                    allreduce_latency_source=f"measured: one-element {ar['backend']} "
                                             f"all-reduce, {tp} ranks, {now}")
    versions = f"torch {torch.__version__}" + (f", CUDA {torch.version.cuda}"
                                              if device.type == "cuda" else
                                              f", {torch.get_num_threads()} threads")
    cal = Calibration(
        engine="torch-eager", device_type=device.type, dtype=dtype, measured_at=now,
        measured_with=f"{info['name']}; {versions}; kvcalc {__version__}; `{command}`; "
                      f"prompt matmul {prefill_shape}",
        read_bytes_per_s=reads[max(reads)], read_bytes_per_s_by_size=reads,
        linear_bytes_per_s=linear, attention_kv_bytes_per_s=int(kv_rate),
        prefill_flops_per_s=prefill, layer_overhead_s=per_layer, step_overhead_s=per_step)
    return Hardware(
        name=name, memory_bytes=int(info.get("memory_bytes") or 1),
        memory_bandwidth_bytes_per_s=cal.read_bytes_per_s,
        flops_per_s={dtype: prefill}, l2_bytes=llc,
        source=f"measured on this device by kvcalc measure --calibrate, {now}",
        notes=("memory_bandwidth_bytes_per_s and flops_per_s are this device's measured "
               "ceilings, not its datasheet's; `calibration` holds the terms latency uses."),
        calibration=cal, **comm)


def to_yaml(hw: Hardware) -> str:
    """The hardware file: every key `--gpu FILE` reads, integers written exactly."""
    import yaml

    cal = hw.calibration
    doc = {
        "name": hw.name, "source": hw.source,
        "memory_bytes": hw.memory_bytes,
        "memory_bandwidth_bytes_per_s": hw.memory_bandwidth_bytes_per_s,
        "l2_bytes": hw.l2_bytes, "flops_per_s": dict(hw.flops_per_s), "notes": hw.notes,
        **({"interconnect_bandwidth_bytes_per_s": hw.interconnect_bandwidth_bytes_per_s,
            "interconnect": hw.interconnect, "allreduce_latency_s": hw.allreduce_latency_s,
            "allreduce_latency_source": hw.allreduce_latency_source}
           if hw.allreduce_latency_s else {}),
        "calibration": {
            "engine": cal.engine, "device_type": cal.device_type, "dtype": cal.dtype,
            "measured_at": cal.measured_at, "measured_with": cal.measured_with,
            "read_bytes_per_s": cal.read_bytes_per_s,
            "read_bytes_per_s_by_size": dict(cal.read_bytes_per_s_by_size),
            "linear_bytes_per_s": {w: dict(t) for w, t in cal.linear_bytes_per_s.items()},
            "attention_kv_bytes_per_s": cal.attention_kv_bytes_per_s,
            "prefill_flops_per_s": cal.prefill_flops_per_s,
            "layer_overhead_s": cal.layer_overhead_s,
            "step_overhead_s": cal.step_overhead_s,
        },
    }
    head = (f"# {hw.name}: measured by `kvcalc measure --calibrate` ({cal.measured_with}).\n"
            "# Use with: kvcalc estimate --gpu THIS_FILE ...\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=100)
