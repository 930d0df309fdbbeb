"""Fit each engine's latency terms on its published rows and write presets/engines/*.yaml.

For every engine in tests/data/published: the terms kvcalc.engines.Engine holds
(bandwidth share per weight format family it has rows for, prefill share of the peak per
family with TTFT rows, host time per layer, GPU time per layer, one all-reduce where
rows run tp > 1), chosen to minimise the sum of squared log(predicted / measured) over
its rows, every fourth row by id held out (tests/published_model.held_out). The
predictions are kvcalc's own (kvcalc.speed.latency through tests/published_model.py), so the
file and the formula cannot drift apart. Nelder-Mead on a bounded transform of each
term; a few thousand evaluations per engine.

    python benchmarks/fit_engines.py   # rewrites presets/engines/*.yaml
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import published  # noqa: E402
import published_model as pm  # noqa: E402
from kvcalc.engines import Engine  # noqa: E402

SHARE_MIN = 0.02  # bandwidth and peak shares live in (0.02, 0.95)
# No kernel streams DRAM at its datasheet rate (refresh, bank and bus turnarounds): the
# best decode kernels measure 85-93% (../reference/measurement.md); a fit at 100% would
# be other terms hiding in the share.
SHARE_MAX = 0.95
TIME_SCALE = 1e-6  # times are 1 us x exp(x)
X_MAX = 13.5  # exp(13.5) = 7.3e5: at most 0.73 s, or 7.3e8 cycles
CYCLE_SCALE = 1e3  # GPU cycle counts are 1,000 x exp(x) (1 us at 1 GHz)
# The loss per row: log(1 + (log(predicted / measured) / ROBUST)^2), the Cauchy loss:
# least squares within a few percent, growing only logarithmically beyond, so a row
# whose configuration the source leaves open cannot drag the terms of all the others.
ROBUST = 0.1
START_SCALES = (1.0, 5.0, 8.5)  # exp(x): 2.7 us, 150 us, 4.9 ms (x1,000 cycles)


def _share(x: float) -> float:
    return SHARE_MIN + (SHARE_MAX - SHARE_MIN) / (1 + math.exp(-x))


def _time(x: float) -> float:
    return TIME_SCALE * math.exp(min(x, X_MAX))


def nelder_mead(f, x0: list[float], steps: int = 3000, scale: float = 1.0) -> list[float]:
    """Minimise f from x0 (the textbook method: reflect, expand, contract, shrink)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (scale if i == j else 0) for j, x in enumerate(x0)]
                            for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(steps):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-10:
            break
        centre = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centre, worst)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centre, worst)]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centre, worst)]
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (p - b) for b, p in zip(best, q)]
                                    for q in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


def _engine(name: str, layout: list[tuple[str, str]], x: list[float], **meta) -> Engine:
    bw, mfu, times, fcycles = {}, {}, {}, {}
    for (kind, key), v in zip(layout, x):
        if kind in ("kv", "amfu"):
            times[key] = round(_share(v), 4)
        elif kind == "bw":
            bw[key] = round(_share(v), 4)
        elif kind == "mfu":
            mfu[key] = round(_share(v), 4)
        elif kind == "fc":
            c = CYCLE_SCALE * math.exp(min(v, X_MAX))
            if c >= 1:  # under a cycle: none
                fcycles[key] = float(f"{c:.3g}")
        elif kind == "c":
            c = CYCLE_SCALE * math.exp(min(v, X_MAX))
            times[key] = float(f"{c:.3g}") if c >= 1 else 0.0  # under a cycle: none
        else:
            t = _time(v)
            times[key] = float(f"{t:.3g}") if t >= 1e-9 else 0.0  # under 1 ns: none
    return Engine(name=name, source=meta.get("source", "fit"), bandwidth_efficiency=bw,
                  **FACTS.get(name, {}),
                  prefill_mfu=mfu, format_layer_cycles=fcycles, **times,
                  **{k: v for k, v in meta.items() if k != "source"})


# What an engine is, not fitted: read in its source.
FACTS = {
    # ggml-cuda's ggml_cuda_op_mul_mat_cublas: "convert src0 and src1 to fp16, multiply as
    # fp16, convert dst to fp32", cublasGemmEx with CUBLAS_COMPUTE_16F (GGML_PREC_DEFAULT).
    "llama.cpp": {"fp16_accumulate": True},
    # vLLM serves AWQ and GPTQ int4 checkpoints on its Marlin kernels where the GPU has
    # them (vllm/model_executor/layers/quantization/auto_awq.py, gptq_marlin.py: the
    # Marlin linear method whenever check_marlin_supported), the kernels `--weight-dtype
    # int4` runs on too: one bandwidth share and per-layer cost for the three.
    "vllm": {"same_kernels": {"awq": "int4", "gptq": "int4"}},
    # TensorRT-LLM builds AWQ and GPTQ int4 layers as one groupwise weight-only layer
    # (tensorrt_llm/quantization/layers.py: WeightOnlyGroupwiseQuantLinear, its
    # pre_quant_scale for AWQ and zero for GPTQ), the kernels int4 weights run on.
    "tensorrt-llm": {"same_kernels": {"awq": "int4", "gptq": "int4"}},
}


def kernel_family(name: str, row) -> str:
    """The family whose kernels run `row`'s weights on engine `name` (FACTS' same_kernels)."""
    f = pm.family(row)
    return FACTS.get(name, {}).get("same_kernels", {}).get(f, f)


def _spread(lengths: list[int]) -> bool:
    lengths = [n for n in lengths if n > 0]
    return bool(lengths) and max(lengths) >= 4096 and max(lengths) >= 4 * min(lengths)


def fit(name: str, rows: list, held: set[str]) -> tuple[Engine, list]:
    train = [r for r in rows if r.id not in held]  # the held-out rows shape nothing here
    fams_decode = sorted({kernel_family(name, r) for r in train
                          if r.metric not in pm.TTFT_METRICS})
    fams_prefill = sorted({kernel_family(name, r) for r in train if r.metric in pm.TTFT_METRICS})
    layout = [("bw", f) for f in fams_decode] + [("mfu", f) for f in fams_prefill]
    layout += [("t", "host_step_s"), ("t", "host_layer_s"), ("c", "layer_cycles")]
    # A quantized format's kernels' own cycles per layer (not fp8's: it runs natively on
    # the tensor cores), where its decode rows span two models or two GPUs (one model on
    # one GPU cannot tell a per-layer cost from a bandwidth share).
    def spans(f: str) -> bool:
        mine = [r for r in train
                if kernel_family(name, r) == f and r.metric not in pm.TTFT_METRICS]
        return len({r.model for r in mine}) >= 2 or len({r.gpu for r in mine}) >= 2

    layout += [("fc", f) for f in fams_decode if f not in ("float", "fp8") and spans(f)]
    # The attention kernel's own shares, where the rows' contexts (decode) or prompts
    # (prefill) span 4x or more up to 4,096 tokens or more: below that attention is a
    # few percent of a 7B model's work and its share cannot be told from the others.
    if _spread([(r.prompt_len or 0) + (r.gen_len or 0) // 2 for r in train
                if r.metric not in pm.TTFT_METRICS]):
        layout.append(("kv", "kv_efficiency"))
    if _spread([r.prompt_len or 0 for r in train if r.metric in pm.TTFT_METRICS]):
        layout.append(("amfu", "attention_mfu"))
    if any(r.metric in pm.TTFT_METRICS + pm.REQUEST_METRICS for r in train):
        layout.append(("t", "request_s"))
    if any(r.gpus > 1 for r in train):
        layout += [("t", "allreduce_s"), ("t", "host_rank_s")]
    measured = {r.id: pm.measured_ms(r) for r in rows}

    def loss(x):
        e = _engine(name, layout, x)
        return sum(math.log1p((math.log(pm.predicted_ms(r, e) / measured[r.id]) / ROBUST) ** 2)
                   for r in train)

    # Fixed costs span microseconds (a kernel) to milliseconds (a host's step): start the
    # times and cycle counts at each of those scales and keep the best fit.
    best = None
    for t0 in START_SCALES:
        x0 = [1.4 if k in ("bw", "kv") else 0.0 if k in ("mfu", "amfu") else t0
              for k, _ in layout]
        x = nelder_mead(loss, x0)
        x = nelder_mead(loss, x, scale=0.3)  # a restart around the first optimum
        if best is None or loss(x) < loss(best):
            best = x
    return _engine(name, layout, best), train


def leave_one_publisher_out(rows: list) -> dict[str, float | None]:
    """Each row's prediction (ms) on terms fitted without its publisher's rows: for every
    engine with rows from two or more publishers (tests/published_model.publisher_of),
    the engine's terms are fitted on all its other publishers' rows and the held-out
    publisher's rows are predicted, for each publisher in turn. A row of an engine with
    one publisher has none (None): nothing outside its source could fit it."""
    out: dict[str, float | None] = {}
    for name in sorted({r.engine for r in rows}):
        mine = [r for r in rows if r.engine == name]
        publishers = sorted({pm.publisher_of(r) for r in mine})
        for p in publishers:
            theirs = [r for r in mine if pm.publisher_of(r) == p]
            if len(publishers) < 2:
                out.update((r.id, None) for r in theirs)
                continue
            others = [r for r in mine if pm.publisher_of(r) != p]
            engine, _ = fit(name, others, set())
            out.update((r.id, pm.predicted_ms(r, engine)) for r in theirs)
    return out


def main() -> None:
    rows = pm.scored(published.load())
    held = pm.held_out(rows)
    out = ROOT / "presets" / "engines"
    out.mkdir(exist_ok=True)
    for name in sorted({r.engine for r in rows}):
        mine = [r for r in rows if r.engine == name]
        engine, train = fit(name, mine, held)
        versions = sorted({str(r.engine_version) for r in mine if r.engine_version})
        counts: dict[str, int] = {}
        for r in train:
            f = kernel_family(name, r)
            counts[f] = counts.get(f, 0) + 1
        sources = sorted({r.file for r in mine})
        doc = _yaml(engine, train, [r for r in mine if r.id in held], versions, counts, sources)
        path = out / f"{name}.yaml"
        path.write_text(doc, encoding="utf-8")
        print(f"wrote {path} ({len(train)} rows fitted, {len(mine) - len(train)} held out)",
              file=sys.stderr)


def _yaml(engine: Engine, train: list, held: list, versions: list[str], counts: dict,
          sources: list[str]) -> str:
    import yaml

    doc = {
        "name": engine.name,
        "source": (f"fitted by benchmarks/fit_engines.py on {len(train)} published rows of "
                   f"tests/data/published ({', '.join(sources)}); every figure below is that "
                   f"fit's, each row's source and quote are in those files"),
        "bandwidth_efficiency": dict(engine.bandwidth_efficiency),
        "prefill_mfu": dict(engine.prefill_mfu),
        **({"kv_efficiency": engine.kv_efficiency} if engine.kv_efficiency else {}),
        **({"attention_mfu": engine.attention_mfu} if engine.attention_mfu else {}),
        **({"fp16_accumulate": True} if engine.fp16_accumulate else {}),
        "host_step_s": engine.host_step_s,
        "host_layer_s": engine.host_layer_s,
        "layer_cycles": engine.layer_cycles,
        **({"format_layer_cycles": dict(engine.format_layer_cycles)}
           if engine.format_layer_cycles else {}),
        **({"same_kernels": dict(engine.same_kernels)} if engine.same_kernels else {}),
        "allreduce_s": engine.allreduce_s,
        "host_rank_s": engine.host_rank_s,
        "request_s": engine.request_s,
        "versions": ", ".join(versions),
        "rows": counts,
        "fitted_on": ", ".join(sorted(r.id for r in train)),
        "held_out": ", ".join(sorted(r.id for r in held)),
        "notes": ("bandwidth_efficiency: share of the GPU's datasheet bandwidth its decode "
                  "kernels reach, by weight format family (K/V at the float share, else at the "
                  "weights'); "
                  "prefill_mfu: share of the dense peak in prefill; kv_efficiency and "
                  "attention_mfu: the attention kernel's shares for K/V in decode and for the "
                  "prompt's attention (absent: the float and prefill shares); "
                  "host_layer_s: host time per "
                  "layer per step, overlapping the GPU's work (host_step_s: per step); "
                  "layer_cycles: GPU cycles per layer per step beyond its bytes, time at the "
                  "GPU's boost clock; allreduce_s: one all-reduce under tensor parallelism "
                  "(two per layer); host_rank_s: host time per step per tensor-parallel rank beyond "
                  "the first; request_s: host time before a request's first token, in series "
                  "with its prefill; same_kernels: formats run on another family's kernels, "
                  "whose figures they take. A family without rows is extrapolated (the "
                  "estimate says so)."),
    }
    import textwrap

    head = "# Generated by benchmarks/fit_engines.py: do not edit by hand; rerun it.\n"
    text = []
    for key, value in doc.items():
        if isinstance(value, str) and len(key) + len(value) > 70:
            # A folded block: lines of at most 80 columns (`kvcalc presets show`), joined
            # back with spaces when read.
            lines = textwrap.wrap(value, 76, break_long_words=False, break_on_hyphens=False)
            text.append(f"{key}: >-\n" + "".join(f"  {line}\n" for line in lines))
        else:
            text.append(yaml.safe_dump({key: value}, sort_keys=False, width=78))
    return head + "".join(text)


if __name__ == "__main__":
    main()
