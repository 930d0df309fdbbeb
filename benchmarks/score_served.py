"""kvcalc bench's predictions beside every published serving run (tests/data/served):
each metric's ratio, predicted / measured, and the share within +-15%, per publisher,
engine and regime. Nothing is fitted here: the engine terms come from tests/data/published
(single-request and batched rows), so every served run is a source the constants never
saw (the SGLang cookbook's concurrency-1 runs are the exception: they are in both).

    python benchmarks/score_served.py            # the summary (markdown)
    python benchmarks/score_served.py --rows     # every run's ratios too
    python benchmarks/score_served.py --loso-kv-share
        # one candidate physical term, the attention kernel's share of bandwidth for K/V
        # in decode, fitted on every publisher but one and scored on that one, in turn
        # (an experiment: no engine file is changed)
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
from kvcalc.served import Load, bench  # noqa: E402
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
_WEIGHTS = {"bf16": None, "fp16": None, "fp8": "fp8", "int4": "int4", "awq": "awq",
            "gptq": "gptq"}


def regime(run) -> str:
    if run.concurrency is not None:
        return "batch 1" if run.concurrency == 1 else "under load"
    if math.isinf(run.request_rate):
        return "batch 1" if run.num_prompts == 1 else "under load"
    return "under load"


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


def predict(run):
    """The run's metrics predicted, or the reason it cannot be."""
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
    num = max(1, round((run.num_prompts or run.completed or 1) / replicas))
    kw = {"input_len": inp, "output_len": out, "num_prompts": num}
    if run.concurrency is not None:
        kw["concurrency"] = max(1, round(run.concurrency / replicas))
    elif not math.isinf(run.request_rate):
        kw["request_rate"] = run.request_rate / replicas
    try:
        ref = engine_ref(run.engine)
        r = bench(load_model(run.model), load_hardware(run.gpu), Load(**kw), engine=ref,
                  tp=run.tp or 1, kv_dtype=run.kv_dtype or kv,
                  weight_dtype=_WEIGHTS[run.weights], max_model_len=length,
                  engine_flags=flags)
    except KvcalcError as e:
        return None, str(e)
    m = dict(r.metrics)
    for k in ("request_throughput", "output_throughput", "total_token_throughput"):
        m[k] *= replicas
    return m, ""


SHARES = tuple(round(0.25 + 0.05 * i, 2) for i in range(16))  # 0.25 .. 1.0


def _loso_kv_share() -> int:
    """Leave one publisher out: for each publisher, the K/V share (one value for every
    engine) that puts the most of the other publishers' under-load TPOT and output
    throughput rows within 15%, scored on the publisher left out; beside it, the share
    fitted on all of them (in-sample) and the engines' own terms."""
    from kvcalc import engines

    rows = [r for r in served.load() if not r.excluded]
    runs = served.runs(rows)
    original = engines.Engine.kv_share
    hits: dict = {}  # (share, publisher) -> [within, n]
    try:
        for share in (None, *SHARES):
            engines.Engine.kv_share = (original if share is None
                                       else (lambda self, f, s=share: s))
            for run_id, measured in runs.items():
                run = measured[0]
                if regime(run) != "under load":
                    continue
                got, _ = predict(run)
                if got is None:
                    continue
                for row in measured:
                    if row.metric not in ("mean_tpot_ms", "output_throughput") or row.per == "gpu":
                        continue
                    cell = hits.setdefault((share, run.publisher), [0, 0])
                    cell[0] += abs(got[row.metric] / row.value - 1) <= 0.15
                    cell[1] += 1
    finally:
        engines.Engine.kv_share = original
    publishers = sorted({p for _, p in hits})

    def total(share, keep) -> tuple[int, int]:
        cells = [hits.get((share, p), [0, 0]) for p in publishers if keep(p)]
        return sum(c[0] for c in cells), sum(c[1] for c in cells)

    print("| publisher left out | share fitted on the others | within 15%, held out | "
          "engines' own terms |")
    print("|---|---|---|---|")
    held_ok = held_n = own_ok = own_n = 0
    for p in publishers:
        best = max(SHARES, key=lambda s: (total(s, lambda q: q != p)[0], -abs(s - 0.8)))
        ok, n = total(best, lambda q: q == p)
        o_ok, o_n = total(None, lambda q: q == p)
        held_ok, held_n, own_ok, own_n = held_ok + ok, held_n + n, own_ok + o_ok, own_n + o_n
        print(f"| {p} | {best:.2f} | {ok}/{n} | {o_ok}/{o_n} |")
    best_all = max(SHARES, key=lambda s: (total(s, lambda q: True)[0], -abs(s - 0.8)))
    ok_all, n_all = total(best_all, lambda q: True)
    print(f"| all, left out in turn | - | {held_ok}/{held_n} ({held_ok / held_n:.0%}) | "
          f"{own_ok}/{own_n} ({own_ok / own_n:.0%}) |")
    print(f"\nin-sample (fitted on every publisher): share {best_all:.2f}, {ok_all}/{n_all} "
          f"({ok_all / n_all:.0%}); the headline is the held-out figure")
    return 0


def main(argv: list[str]) -> int:
    if "--loso-kv-share" in argv:
        return _loso_kv_share()
    rows = [r for r in served.load() if not r.excluded]
    runs = served.runs(rows)
    scores = defaultdict(lambda: [0, 0])  # (publisher|engine|regime, metric) -> [within, n]
    skipped = defaultdict(int)
    lines = []
    for run_id, measured in sorted(runs.items()):
        run = measured[0]
        got, why = predict(run)
        if got is None:
            skipped[why] += 1
            continue
        for row in measured:
            if row.metric not in SCORED or row.value <= 0:
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
    if "--rows" in argv:
        print("\n| run | metric | measured | predicted | ratio |\n|---|---|---|---|---|")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
