"""kvcalc bench's predictions beside every published serving run (tests/data/served):
each metric's ratio, predicted / measured, and the share within +-15%, per publisher,
engine and regime. The engines' single-stream terms come from tests/data/published; the
served terms (request and per-running-request host time, the MoE and K/V shares) are
fitted on these very runs, so this score is in-sample.

    python benchmarks/score_served.py            # the summary (markdown)
    python benchmarks/score_served.py --rows     # every run's ratios too
    python benchmarks/score_served.py --sharegpt-means  # ShareGPT runs at their means

The served terms (presets/served/terms.yaml) are fitted on these runs by
benchmarks/fit_served.py, which scores them leave one publisher out: its held-out share
is the headline, this script's the in-sample one.
"""

from __future__ import annotations

import math
import shlex
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import served  # noqa: E402  (tests/served.py: the loader and schema)

from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.presets import load_hardware, load_model, model_names  # noqa: E402
from kvcalc.served import Load, bench, random_lengths, sharegpt_lengths  # noqa: E402
from kvcalc.serving import engine_ref  # noqa: E402

SCORED = ("mean_tpot_ms", "median_tpot_ms", "output_throughput", "mean_ttft_ms",
          "median_ttft_ms")
# the engines' own flags a run's server command states, by kvcalc's parameter names
_FLAGS = {"--gpu-memory-utilization": ("gpu_memory_utilization", str),
          "--max-num-seqs": ("max_num_seqs", int),
          "--max-num-batched-tokens": ("max_num_batched_tokens", int),
          "--mem-fraction-static": ("mem_fraction_static", str),
          "--max-running-requests": ("max_running_requests", int),
          "--chunked-prefill-size": ("chunked_prefill_size", int),
          "--max_batch_size": ("max_batch_size", int), "--max_num_tokens": ("max_num_tokens", int),
          "--kv_cache_free_gpu_memory_fraction": ("free_gpu_memory_fraction", str)}
_LENGTH = {"--max-model-len": "max_model_len", "--context-length": "max_model_len",
           "--max_seq_len": "max_model_len"}
# the run's checkpoint format -> kvcalc's weight dtype (None: as the preset's config
# stores it). Not scored: NVFP4 (NVIDIA's ModelOpt re-quantized checkpoints, which no
# preset holds) and MXFP4 (gpt-oss: no engine file has measured MXFP4 kernel terms, and
# fitted with them in, the served terms of every other run move: 266 of 586 rows within
# 15% in-sample, 45/201 of gpt-oss's)
_WEIGHTS = {"bf16": None, "fp16": None, "fp8": "fp8", "int4": "int4", "awq": "awq",
            "gptq": "gptq"}


def regime(run) -> str:
    """"batch 1" or "under load", as kvcalc bench names its held-out band."""
    from kvcalc.served.step import regime as of

    return of(run.concurrency, run.request_rate, run.num_prompts)


def server_flags(run) -> tuple[dict, int | None, str]:
    out, length, kv = {}, None, "bf16"
    words = shlex.split(run.server or "")
    for i, w in enumerate(words[:-1]):
        key, _, inline = w.partition("=")
        value = inline or words[i + 1]
        if key in _FLAGS:
            name, kind = _FLAGS[key]
            out[name] = kind(value)
        elif key in _LENGTH:
            length = int(value)
        elif key in ("--kv-cache-dtype",) and value.startswith("fp8"):
            kv = "fp8"
    return out, length, kv


# ShareGPT runs timed with kvcalc.served.sharegpt_lengths' spread, or (--sharegpt-means)
# every request at the run's mean lengths
SHAREGPT_SPREAD = True

# clients that send the first prompt once before the run (vllm bench serve's initial test
# run, benchmark_serving.py's, bench_serving's warmup)
WARMUP_CLIENTS = ("vllm bench serve", "vllm benchmark_serving.py", "sglang.bench_serving")


def release_of(run):
    """The engine at the run's release where its wing reads that release, else at the
    wing's default."""
    if run.engine_version and run.engine_version != "unknown":
        try:
            return engine_ref(f"{run.engine}@{run.engine_version}")
        except KvcalcError:
            pass
    return engine_ref(run.engine)


def ttft_floor_ms(run) -> dict:
    """The least mean and median TTFT a burst (every request sent at once, no prefix hit
    stated) can have on the run's GPUs: its prompts' prefill FLOPs, attention left out,
    done one after another at the GPUs' highest dense peak (any other order, or any
    overlap, only finishes some later). The warm-up prompt is taken as cached. {} where
    no floor is drawn (a closed or Poisson loop, lengths or preset unknown)."""
    if (run.concurrency is not None or not math.isinf(run.request_rate) or not run.input_len
            or run.model not in model_names()):
        return {}
    from kvcalc.estimate import workload_for
    from kvcalc.speed.latency import step_figures

    n = (run.num_prompts or run.completed or 0) - 1  # the warm-up's prompt is cached
    if n < 2:
        return {}
    spec, hw = load_model(run.model), load_hardware(run.gpu)
    gpus = run.gpus or run.tp or 1
    flops = step_figures(spec, workload_for(spec, seq_len=run.input_len,
                                            prompt_len=run.input_len)).prefill_flops
    flops -= sum(n_ * mx.prefill_flops(run.input_len)
                 for layer, n_ in spec.groups() for mx in layer.mixers)
    peak = max(hw.peak_flops(d) for d in ("fp8", "bf16"))
    one_ms = 1e3 * flops / (peak * gpus)
    return {"mean_ttft_ms": one_ms * (n + 1) / 2, "median_ttft_ms": one_ms * ((n + 1) // 2)}


def below_floor(run, row, floors: dict) -> bool:
    """A TTFT row under its run's floor (ttft_floor_ms): the run took prefix-cache hits
    it does not state, which no model told the stated settings can predict."""
    return row.metric in floors and row.value < floors[row.metric]


def predict(run, terms=None):
    """The run's metrics predicted, or the reason it cannot be (`terms`: served terms
    to time with instead of the engine's fitted ones)."""
    if run.model not in model_names():
        return None, "no kvcalc preset for the model"
    if run.weights not in _WEIGHTS:
        return None, f"{run.weights} weights: not counted here"
    inp = run.input_len or (round(run.total_input_tokens / run.completed)
                            if run.total_input_tokens and run.completed else None)
    out = run.output_len or (round(run.total_output_tokens / run.completed)
                             if run.total_output_tokens and run.completed else None)
    if not inp or not out:
        return None, "lengths not stated"
    ep = run.ep or 1
    replicas = run.dp if (run.dp or 1) > 1 and ep == 1 else 1
    flags, length, kv = server_flags(run)
    flags.update(run.engine_options or {})
    if run.client == "trtllm-bench":
        # trtllm-bench chunks prompts unless told not to
        # (--enable_chunked_context/--disable_chunked_context, default True)
        flags.setdefault("enable_chunked_prefill", True)
    # a source that does not say how many requests ran: kvcalc bench's own default (ten
    # rounds of the concurrency, or 1,000 sent at once), a steady run either way
    sent = run.num_prompts or run.completed or (10 * run.concurrency if run.concurrency
                                                else 1000)
    num = max(1, round(sent / replicas))
    kw = {"input_len": inp, "output_len": out, "num_prompts": num}
    if run.concurrency is not None:
        kw["concurrency"] = max(1, round(run.concurrency / replicas))
    elif not math.isinf(run.request_rate):
        kw["request_rate"] = run.request_rate / replicas
    # the client's warm-up request leaves the first prompt in the prefix cache
    kw["warmup"] = run.client in WARMUP_CLIENTS and run.prefix_caching is not False
    # ShareGPT's spread of lengths at the run's means (kvcalc.served.sharegpt_lengths: a
    # published draw, scaled), unless --sharegpt-means; each request's own where its result
    # file lists them (tests/data/served/lengths)
    exact = served.lengths(run.run) if run.dataset == "sharegpt" else None
    if exact and len(exact) == num:  # the lengths its result file records, request by request
        kw["lengths"] = tuple((p, max(o, 1)) for p, o in exact)  # 0: an empty reply, one token
    elif run.dataset == "sharegpt" and SHAREGPT_SPREAD:
        kw["lengths"] = sharegpt_lengths(inp, out, num)
    # a random dataset's lengths as the client draws them at its range ratio
    if run.dataset == "random" and run.input_len and run.output_len:
        client = "sglang" if run.client == "sglang.bench_serving" else "vllm"
        ratio = run.range_ratio if run.range_ratio is not None else (
            0.0 if client == "sglang" else 0.0)
        if (client == "sglang" and ratio < 1) or (client == "vllm" and ratio > 0):
            kw["lengths"] = random_lengths(run.input_len, run.output_len, num, ratio, client)
    try:
        ref = release_of(run)
        r = bench(load_model(run.model), load_hardware(run.gpu), Load(**kw), engine=ref,
                  tp=run.tp or 1, kv_dtype=run.kv_dtype or kv,
                  weight_dtype=_WEIGHTS[run.weights], max_model_len=length,
                  engine_flags=flags, terms=terms, past_saturation=True)
    except KvcalcError as e:
        return None, str(e)
    m = dict(r.metrics)
    for k in ("request_throughput", "output_throughput", "total_token_throughput"):
        m[k] *= replicas
    return m, ""


def main(argv: list[str]) -> int:
    global SHAREGPT_SPREAD
    SHAREGPT_SPREAD = "--sharegpt-means" not in argv
    rows = [r for r in served.load() if not r.excluded]
    runs = served.runs(rows)
    scores = defaultdict(lambda: [0, 0])  # (publisher|engine|regime, metric) -> [within, n]
    skipped = defaultdict(int)
    lines = []
    floored = []
    for run_id, measured in sorted(runs.items()):
        run = measured[0]
        got, why = predict(run)
        if got is None:
            skipped[why] += 1
            continue
        floors = ttft_floor_ms(run)
        for row in measured:
            if row.metric not in SCORED or row.value <= 0:
                continue
            if below_floor(run, row, floors):
                floored.append(f"{run_id} {row.metric} {row.value:g} ms < "
                               f"{floors[row.metric]:.0f} ms")
                continue
            per_gpu = row.per == "gpu"
            value = got[row.metric] / (row.gpus if per_gpu else 1)
            ratio = value / row.value
            ok = abs(ratio - 1) <= 0.15
            for key in ((run.publisher, "all"), ("all", run.engine), ("all", regime(run)),
                        ("all", "all")):
                scores[(key, row.metric)][0] += ok
                scores[(key, row.metric)][1] += 1
            lines.append(f"| {run_id} | {row.metric} | {row.value:g} | {value:.4g} | {ratio:.2f} |")
    print("| group | " + " | ".join(SCORED) + " |")
    print("|---|" + "---|" * len(SCORED))
    groups = sorted({k for k, _ in scores})
    for g in groups:
        cells = []
        for m in SCORED:
            ok, n = scores.get((g, m), [0, 0])
            cells.append(f"{ok}/{n} ({ok / n:.0%})" if n else "-")
        print(f"| {' / '.join(g)} | " + " | ".join(cells) + " |")
    print()
    for why, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        print(f"- skipped {n} runs: {why}")
    if floored:
        print(f"- not scored, {len(floored)} TTFT rows below what the stated settings allow "
              "(the prompts' prefill FLOPs one after another at the GPUs' dense peak: "
              "prefix-cache hits the run does not state): " + "; ".join(floored))
    if "--rows" in argv:
        print("\n| run | metric | measured | predicted | ratio |\n|---|---|---|---|---|")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
