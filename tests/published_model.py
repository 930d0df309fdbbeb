"""kvcalc's prediction for a published row (tests/published.py), as `kvcalc estimate`
computes it: the row's model, GPU, tp, batch, lengths and checkpoint bytes, on the row's
engine (presets/engines) or on the datasheet roofline.

Shared by tests/test_engines.py (the accuracy mark), benchmarks/fit_engines.py (which
fits the engine files) and benchmarks/published_report.py (reports/published.md).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import published
from kvcalc.engines import Engine, load_engine
from kvcalc.estimate import stored_weights, workload_for
from kvcalc.formulas.params import param_counts
from kvcalc.formulas.step import StoredWeights
from kvcalc.speed.latency import Latency, latency_from_figures, step_figures
from kvcalc.presets import load_hardware, load_model

ROOT = Path(__file__).resolve().parent.parent

# Row formats kvcalc builds as a checkpoint layout: (--weight-dtype, --group-size). GGUF
# Q4_0 is int4 in blocks of 32 with an fp16 scale (4.5 bits), Q8_0 int8 likewise (8.5).
KVCALC_FORMAT = {"fp16": ("bf16", None), "bf16": ("bf16", None), "fp8": ("fp8", None),
                 "int8": ("int8", None), "q4_0": ("int4", 32), "q8_0": ("int8", 32),
                 "awq": ("awq", 128), "gptq": ("gptq", 128),
                 # the checkpoint's own layout (the model's quantization_config)
                 "mxfp4": (None, None)}
# Format family (kvcalc.engines.FAMILIES) of every published format.
FAMILY = {"fp16": "float", "bf16": "float", "fp8": "fp8", "int8": "int8", "int4": "int4",
          "q4_0": "int4", "q4_k_m": "int4", "q8_0": "int8", "awq": "awq", "gptq": "gptq",
          "bnb-int8": "bnb8", "bnb-4bit": "bnb4", "mxfp4": "mxfp4"}
# bitsandbytes NF4 with double quantization: 4 bits + an 8-bit absmax per 64 weights and
# an fp32 per 256 blocks: 4 + 8/64 + 32/(64 x 256) = 4.127 bits (transformers' default).
BNB4_BITS = 4 + 8 / 64 + 32 / (64 * 256)
# LLM.int8: int8 weights and one fp32 scale per output row (negligible): 8 bits.
BNB8_BITS = 8.0

TPOT_METRICS = ("decode_tokens_per_s", "ms_per_token", "s_per_token")
TTFT_METRICS = ("ttft_ms", "ttft_s", "prefill_tokens_per_s")
REQUEST_METRICS = ("request_latency_ms", "request_latency_s", "output_tokens_per_s")
PREDICTED_METRICS = TPOT_METRICS + TTFT_METRICS + REQUEST_METRICS


# Hosts that are a publisher's own site under another name (publisher_of).
SITE_PUBLISHER = {"blog.mlc.ai": "mlc-ai"}


def publisher_of(row) -> str:
    """Who measured and published `row`: the GitHub organisation or user of its source
    (github.com/ORG/..., ORG.github.io), the organisation of a Buildkite pipeline, else
    the site (SITE_PUBLISHER names a project's own blog). Leave one source out groups by
    it, so two files of one publisher (Argonne's three CSVs) are one source."""
    from urllib.parse import urlparse

    url = urlparse(row.source)
    host, parts = url.netloc.lower(), [p for p in url.path.split("/") if p]
    if host == "github.com" and parts:
        return parts[0]
    if host.endswith(".github.io"):
        return host.split(".")[0]
    if host == "buildkite.com" and parts:
        return parts[0]
    return SITE_PUBLISHER.get(host, host)


def regime(row) -> str:
    """The row's regime: "batch 1" or "batched" decode, "prefill" (a first token or a
    prompt's rate) or "request" (a whole request's time)."""
    if row.metric in TTFT_METRICS:
        return "prefill"
    if row.metric in REQUEST_METRICS:
        return "request"
    return "batch 1" if row.batch == 1 else "batched"


def family(row) -> str:
    if row.weights.startswith("exl2-"):
        return "exl2"
    if row.weights == "awq" and (row.kernel or "").upper() == "GEMV":
        return "awq-gemv"  # the checkpoint packed for AutoAWQ's GEMV kernel
    return FAMILY[row.weights]


@lru_cache(maxsize=None)
def _model(name: str):
    if name.startswith("tests/"):
        from kvcalc.hfconfig import spec_from_hf_config_file

        return spec_from_hf_config_file(ROOT / name)
    return load_model(name)


def measured_ms(row) -> float | None:
    """The row's figure as the time kvcalc predicts (ms): one decode step, the first
    token, or the whole request; None for a metric kvcalc does not predict (achieved
    GB/s is the source's own tokens/s x model size, not a measurement of its own)."""
    if row.metric in TPOT_METRICS:
        return published.decode_ms_per_token(row)
    if row.metric in ("ttft_ms", "request_latency_ms"):
        return row.value
    if row.metric in ("ttft_s", "request_latency_s"):
        return 1000 * row.value
    if row.metric == "output_tokens_per_s" and row.gen_len:
        # each sequence's gen_len tokens over the request's time (batch x that, summed)
        tokens = row.gen_len * (row.batch if row.per == "batch" else 1)
        return 1000 * tokens / row.value
    if row.metric == "prefill_tokens_per_s" and row.prompt_len:
        tokens = row.prompt_len * (row.batch if row.per == "batch" else 1)
        return 1000 * tokens / row.value
    return None


@lru_cache(maxsize=None)
def _hardware(name: str):
    return load_hardware(name)


@lru_cache(maxsize=None)
def _figures(row, seq_len: int):
    """The row's workload, its hardware and its step figures at `seq_len`: the same on
    every engine (the fit evaluates thousands of engines on them)."""
    spec = _model(row.model)
    prompt = row.prompt_len or None
    kv = "fp8" if row.kv_dtype == "fp8" else "int8" if row.kv_dtype == "int8" else "bf16"
    if row.weights in KVCALC_FORMAT:
        wd, g = KVCALC_FORMAT[row.weights]
        w = workload_for(spec, seq_len=seq_len, batch=row.batch, weight_dtype=wd, tp=row.gpus,
                         group_size=g, prompt_len=prompt, kv_dtype=kv)
        stored = stored_weights(spec, w.quantization, row.gpus)
    else:  # a format kvcalc has no layout for: the stored bytes from its bits per weight
        bits = (row.bits_per_weight or {"bnb-4bit": BNB4_BITS, "bnb-int8": BNB8_BITS}[row.weights])
        w = workload_for(spec, seq_len=seq_len, batch=row.batch, weight_dtype="bf16",
                         tp=row.gpus, prompt_len=prompt, kv_dtype=kv)
        total = int(param_counts(spec).total * bits / 8)
        stored = StoredWeights(total=total, breakdown={}, per_device=-(-total // row.gpus),
                               tp=row.gpus, label=f"{bits:g} bits per weight")
    return spec, w, step_figures(spec, w, stored=stored)


def _latency(row, engine: Engine | None, seq_len: int) -> Latency:
    spec, w, figures = _figures(row, seq_len)
    return latency_from_figures(spec, w, figures, hardware=_hardware(row.gpu),
                                engine=engine,
                                weight_format=family(row) if engine is not None else None)


def predicted_ms(row, engine: Engine | None) -> float | None:
    """kvcalc's time for the row's metric (ms): TPOT at the middle of generation, TTFT
    for the prompt, or a request's TTFT + gen_len steps."""
    if row.metric not in PREDICTED_METRICS:
        return None
    prompt, gen = row.prompt_len or 0, row.gen_len or 0
    if row.metric in TTFT_METRICS:
        return 1000 * _latency(row, engine, max(1, prompt)).ttft_s
    lat = _latency(row, engine, max(1, prompt + gen // 2))
    if row.metric in REQUEST_METRICS:
        return 1000 * (lat.ttft_s + gen * lat.tpot_s)
    return 1000 * lat.tpot_s


@lru_cache(maxsize=None)
def engine(name: str) -> Engine:
    return load_engine(name)[0]


def scored(rows) -> list:
    """The rows the accuracy mark is taken on: a time kvcalc predicts, and not excluded
    (a row's `excluded` says why; excluded rows are reported apart)."""
    return [r for r in rows if measured_ms(r) is not None and not r.excluded]


def held_out(rows) -> set[str]:
    """Rows kept out of fitting: every fourth of each engine's predicted rows by id."""
    out = set()
    by_engine: dict[str, list] = {}
    for r in rows:
        if measured_ms(r) is not None:
            by_engine.setdefault(r.engine, []).append(r.id)
    for ids in by_engine.values():
        out.update(sorted(ids)[3::4])
    return out
