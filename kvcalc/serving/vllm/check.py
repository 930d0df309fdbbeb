"""A vLLM start-up log beside kvcalc's count: the settings the log shows, run through
`serving_capacity`, term by term (`kvcalc check LOG`).

What the log states is the truth about that start-up: its release, flags (non-default
args, the engine config), dtype, KV-cache dtype and weights' format. Weights are counted
as the model's config stores them (its quantization_config, through kvcalc.quant, as
`estimate` counts them); a log that loads a quantized checkpoint (quantization=awq_marlin,
compressed-tensors...) for a MODEL whose config has no quantization_config takes the
weights the log measured, and says so, rather than count 16-bit weights.

A term "differs" when kvcalc's figure is off the log's by more than DIFF_SHARE of it and
more than the log's own rounding (0.01 GiB printed, so half of that either way) plus
DIFF_FLOOR; the one that differs most is named first. A term the release logs but does
not subtract from the KV cache's budget (the CUDA-graph estimate before 0.20, the memory
the capture took) is shown as such, never as a miss; nor is a term taken from the log.

A start-up that failed gets its cause, as the log gives it, and the fix (`diagnose`):
max_model_len beyond the model's context, another process holding memory, out of memory
loading the weights, in the profile run, the sampler warm-up or CUDA-graph capture,
missing model files, and the KV-cache refusals.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.vllm.rules import default_engine, rules_for, same_release
from kvcalc.serving.vllm.settings import GiB, EngineSettings
from kvcalc.serving.vllm.capacity import Capacity, serving_capacity
from kvcalc.serving.vllm.log import KV_REFUSALS, TERMS, UNMODELLED_FLAGS, VllmLog
from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["DIFF_FLOOR", "DIFF_SHARE", "FAILURE_LABELS", "Diagnosis", "LogCheck", "TermCheck",
           "check_log", "diagnose", "failure_dict", "graphs_subtracted", "gpu_preset_for",
           "settings_from_log"]

DIFF_SHARE = 0.05
DIFF_FLOOR = GiB // 20  # 0.05 GiB: below it, a term is as close as the log can say

# vLLM's --dtype / --kv-cache-dtype names -> kvcalc's.
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16",
           "float32": "fp32", "float": "fp32", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
           "fp8_ds_mla": "fp8", "fp8_inc": "fp8"}
# GPU names as the driver prints them -> hardware presets (first match wins).
_GPUS = ((r"h100.*(pcie|nvl)", "h100-pcie"), (r"h100", "h100-sxm"), (r"h200", "h200"),
         (r"gh200", "h200"), (r"b200", "b200"), (r"gb200", "gb200"), (r"h20\b", "h20"),
         (r"a100.*40", "a100-40gb"), (r"a100", "a100-80gb"), (r"l40s", "l40s"), (r"\bl4\b", "l4"),
         (r"a10g", "a10g"), (r"\ba10\b", "a10"), (r"\bt4\b", "t4"), (r"v100", "v100"),
         (r"rtx pro 6000", "rtx-pro-6000-blackwell"), (r"rtx 6000 ada", "rtx6000-ada"),
         (r"5090", "rtx5090"), (r"4090", "rtx4090"), (r"4070", "rtx4070"),
         (r"4060 ti", "rtx4060ti"), (r"4060", "rtx4060"), (r"3090", "rtx3090"),
         (r"mi325", "mi325x"), (r"mi300", "mi300x"), (r"gb10|spark", "dgx-spark"))


# FAILURE_KINDS in a few words, for headlines.
FAILURE_LABELS = {
    "max_model_len_over_context": "max_model_len beyond the model's context",
    "free_memory": "too little free memory at start-up",
    "oom_loading": "out of memory loading the weights",
    "oom_profile": "out of memory in the profile run",
    "oom_sampler": "out of memory in the sampler warm-up",
    "oom_cuda_graphs": "out of memory capturing CUDA graphs",
    "oom": "out of memory",
    "missing_model": "model files not found",
    "kv_cache_too_small": "max_model_len beyond the KV cache",
    "no_kv_memory": "no memory left for the KV cache",
    "unknown": "cause not in the lines given",
}
NOT_SUBTRACTED = "not subtracted"
FROM_LOG = "from the log"


@record
class Diagnosis:
    """Why a start-up failed, in vLLM's words and in a sentence, and what to change."""

    kind: str  # kvcalc.serving.vllm.log.FAILURE_KINDS
    cause: str
    fix: str
    words: str  # the log's own line


@record
class TermCheck:
    """One figure the log printed, beside kvcalc's (bytes, or tokens/blocks)."""

    name: str
    logged: int | float
    kvcalc: int | float
    unit: str  # "bytes", "tokens", "blocks", "x"
    # "": compared; NOT_SUBTRACTED: the release logs the term but leaves it out of the KV
    # cache's budget (kvcalc counts what vLLM subtracts: 0); FROM_LOG: kvcalc took the
    # log's own figure (nothing to compare)
    status: str = ""

    @property
    def difference(self) -> float:
        return self.kvcalc - self.logged

    @property
    def differs(self) -> bool:
        if self.status:
            return False
        slack = max(abs(self.logged) * DIFF_SHARE, DIFF_FLOOR if self.unit == "bytes" else 0)
        if self.unit == "x":
            slack = max(abs(self.logged) * DIFF_SHARE, 0.01)
        return abs(self.difference) > slack


@record
class LogCheck:
    """The log, the settings read from it, and kvcalc's count term by term."""

    log: VllmLog
    model: str  # the model counted (the log's name for it is log.model)
    settings: EngineSettings
    hardware: str
    capacity: Capacity
    terms: tuple[TermCheck, ...]  # memory terms (bytes)
    counts: tuple[TermCheck, ...]  # blocks, tokens, concurrency
    notes: tuple[str, ...] = field(default_factory=tuple)
    model_params: int | None = None  # the counted model's parameters (which model it was)
    diagnosis: Diagnosis | None = None  # why vLLM did not start, and the fix

    @property
    def differing(self) -> tuple[TermCheck, ...]:
        """The figures kvcalc misses, the largest relative miss first."""
        off = [t for t in (*self.terms, *self.counts) if t.differs]
        return tuple(sorted(off, key=lambda t: -abs(t.difference) / max(abs(t.logged), 1e-9)))

    def as_dict(self) -> dict:
        log, cap = self.log, self.capacity
        counts = {t.name: {"logged": t.logged, "kvcalc": t.kvcalc} for t in self.counts}
        kv_tokens = counts.pop("kv_cache_tokens", {"logged": None, "kvcalc": cap.kv_cache_tokens})
        return {
            "vllm_version": self.settings.vllm_version, "engine": self.settings.engine,
            "version_printed": log.vllm_version is not None,
            "model": log.model or self.model, "gpu": self.hardware,
            "settings": {"max_model_len": self.settings.max_model_len,
                         "gpu_memory_utilization": float(self.settings.gpu_memory_utilization),
                         "tp": self.settings.tp, "pp": self.settings.pp,
                         "max_num_batched_tokens": cap.max_num_batched_tokens,
                         "max_num_seqs": cap.max_num_seqs, "block_size": cap.block_size,
                         "kv_dtype": self.settings.kv_dtype,
                         "enforce_eager": self.settings.enforce_eager},
            "terms": {t.name: {"logged_bytes": t.logged, "kvcalc_bytes": t.kvcalc,
                               **({"status": t.status} if t.status else {})}
                      for t in self.terms},
            "kv_cache_tokens": kv_tokens,
            **counts,
            "refused": {"logged": log.refused, "kvcalc": not cap.fits},
            "refusal": {"logged": log.refusal, "kvcalc": cap.refusal},
            "failure": failure_dict(self.diagnosis, log),
            "differs": [{"name": t.name, "logged": t.logged, "kvcalc": t.kvcalc,
                         "difference": t.difference,
                         "ratio": (t.kvcalc / t.logged) if t.logged else None}
                        for t in self.differing],
            "ranks": list(log.ranks),
            "notes": [*log.notes, *self.notes, *cap.notes],
        }


def gpu_preset_for(name: str) -> str | None:
    """The hardware preset for a GPU name as the driver prints it ("NVIDIA H100 80GB HBM3")."""
    low = name.lower().replace("-", " ").replace("_", " ")
    return next((preset for rx, preset in _GPUS if re.search(rx, low)), None)


def _dtype(name: object, flag: str) -> str:
    text = str(name).lower().replace("torch.", "")
    if text == "auto":
        return "auto"
    if text not in _DTYPES:
        raise KvcalcError(f"the log's {flag} {text!r} is not one kvcalc models "
                          f"({', '.join(sorted(set(_DTYPES)))})")
    return _DTYPES[text]


def settings_from_log(log: VllmLog, spec: ModelSpec, *, vllm_version: str | None = None
                      ) -> tuple[EngineSettings, list[str]]:
    """The engine settings the log shows, the engine's defaults for the rest."""
    notes: list[str] = []
    version = log.vllm_version or vllm_version
    if version is None:
        raise ParameterError("the log does not print vLLM's version (no 'Initializing a V1 "
                             "LLM engine (vX)' or 'version X' line): give {vllm_version}",
                             "vllm_version")
    if vllm_version is not None and log.vllm_version is not None:
        if not same_release(vllm_version, log.vllm_version):
            notes.append(f"--vllm-version {vllm_version} given; the log says "
                         f"{log.vllm_version}, which is used")
    engine = log.engine or default_engine(version)
    f = log.flags
    length = f.get("max_model_len") or spec.max_context
    if not length:
        raise KvcalcError("neither the log nor the model gives max_model_len")
    util = f.get("gpu_memory_utilization", "0.9")
    kw = dict(max_model_len=int(length), gpu_memory_utilization=str(util),
              tp=int(f.get("tensor_parallel_size", 1)), pp=int(f.get("pipeline_parallel_size", 1)),
              vllm_version=version, engine=engine, allow_long_max_model_len=True)
    for key in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks_override"):
        if isinstance(f.get(key), int) and not isinstance(f.get(key), bool):
            kw[key] = f[key]
    if isinstance(f.get("kv_cache_memory_bytes"), int):
        kw["kv_cache_memory_bytes"] = f["kv_cache_memory_bytes"]
    if isinstance(f.get("data_parallel_size"), int) and f["data_parallel_size"] > 1:
        kw["dp"] = f["data_parallel_size"]  # replicas: each rank's pool is counted alike
    if f.get("enable_expert_parallel") is True:
        kw["enable_expert_parallel"] = True
    if f.get("enforce_eager") is True:
        kw["enforce_eager"] = True
    if isinstance(f.get("enable_chunked_prefill"), bool):
        kw["chunked_prefill"] = f["enable_chunked_prefill"]
    if isinstance(f.get("enable_prefix_caching"), bool):
        kw["prefix_caching"] = f["enable_prefix_caching"]
    if isinstance(f.get("async_scheduling"), bool):
        kw["async_scheduling"] = f["async_scheduling"]
    if isinstance(f.get("limit_mm_per_prompt"), (dict, str)) and f["limit_mm_per_prompt"]:
        limit = f["limit_mm_per_prompt"]
        kw["limit_mm_per_prompt"] = limit if isinstance(limit, str) else json.dumps(limit)
    if f.get("mm_encoder_tp_mode") in ("weights", "data"):
        kw["mm_encoder_tp_mode"] = f["mm_encoder_tp_mode"]
    if "kv_cache_dtype" in f:
        kw["kv_dtype"] = _dtype(f["kv_cache_dtype"], "--kv-cache-dtype")
    if "mamba_ssm_cache_dtype" in f:
        kw["mamba_ssm_dtype"] = _dtype(f["mamba_ssm_cache_dtype"], "--mamba-ssm-cache-dtype")
    if "dtype" in f and _dtype(f["dtype"], "--dtype") not in ("auto", "fp8"):
        kw["model_dtype"] = _dtype(f["dtype"], "--dtype")
    _weights_format(log, spec, kw, notes)
    if f.get("sampler") == "flashinfer":  # the log's own sampler line
        kw["sampler"] = "flashinfer"
    elif f.get("sampler") == "native":
        kw["sampler"] = rules_for(version, engine).native_sampler()
    settings = EngineSettings(**kw)
    _graphs_as_logged(log, settings, notes)
    for key in UNMODELLED_FLAGS:
        value = f.get(key)
        if value not in (None, False, 0, 0.0, "", "None", "none", "[]", "{}"):
            notes.append(f"the log sets {key}={value}: kvcalc's count does not model it, so "
                         f"the terms it changes may differ")
    return settings.replace(**_graph_override(log, settings)), notes


# vLLM's --quantization names (and the kernels it picks for a checkpoint's own format) ->
# the quant_method a checkpoint's config gives
_METHODS = {"awq_marlin": "awq", "gptq_marlin": "gptq", "gptq_marlin_24": "gptq",
            "gptq_bitblas": "gptq", "awq_triton": "awq", "modelopt_fp4": "modelopt",
            "fp8": "fp8", "compressed_tensors": "compressed-tensors"}


def _method(name: str) -> str:
    name = name.strip().lower()
    return _METHODS.get(name, _METHODS.get(name.replace("-", "_"), name))


def _weights_format(log: VllmLog, spec: ModelSpec, kw: dict, notes: list[str]) -> None:
    """The weights' format: the model config's (kvcalc.quant, as estimate counts it), else
    vLLM's own fp8 of a 16-bit checkpoint, else, for a quantized checkpoint MODEL's config
    does not describe, the weights the log measured."""
    stated = str(log.flags.get("quantization") or "").strip()
    if stated.lower() in ("", "none"):
        return
    config_q = spec.extra.get("quantization")
    if config_q is not None or spec.extra.get("quantization_error") or "checkpoint" in spec.extra:
        if "checkpoint" in spec.extra:  # a folder's or the Hub's headers, as estimate reads them
            from kvcalc.quant.checkpoint import weights_as

            kw["weight_quantization"] = weights_as(spec, None)
        if config_q is not None and _method(stated) != _method(config_q.method):
            notes.append(f"the log loads {stated} weights; {spec.name}'s config says "
                         f"{config_q.method}: its config's format is counted")
        return
    if _method(stated) == "fp8":  # vLLM quantizes the 16-bit checkpoint to fp8 as it loads
        kw["weight_dtype"] = "fp8"
        return
    if "weights" not in log.terms:
        raise KvcalcError(f"the log loads {stated} weights, but {spec.name}'s config has no "
                          "quantization_config and the log prints no weights: give the "
                          "checkpoint's config.json (or its folder) as MODEL")
    kw["weights_bytes"] = log.terms["weights"]
    notes.append(f"the log loads {stated} weights and {spec.name}'s config has no "
                 f"quantization_config: the weights are the log's "
                 f"{log.terms['weights'] / GiB:.2f} GiB, not counted; give the checkpoint's "
                 "config.json as MODEL to count them")


def graphs_subtracted(log: VllmLog, settings: EngineSettings) -> bool:
    """Whether this start-up took its CUDA-graph estimate out of the KV cache's budget: as
    the log says it (0.18+ print it), else by the release (V1 0.20+, not enforce_eager)."""
    if settings.enforce_eager:
        return False
    if log.graph_estimate_subtracted is not None:
        return log.graph_estimate_subtracted
    return settings.rules.graphs_subtracted()


def _release_subtracts(settings: EngineSettings) -> bool:
    return not settings.enforce_eager and settings.rules.graphs_subtracted()


def _graphs_as_logged(log: VllmLog, settings: EngineSettings, notes: list[str]) -> None:
    said, rule = log.graph_estimate_subtracted, _release_subtracts(settings)
    logged = log.terms.get("cuda_graphs")
    if said is None or said == rule or settings.enforce_eager:
        if logged is not None and not graphs_subtracted(log, settings):
            notes.append(f"vLLM {settings.vllm_version} logs its CUDA-graph estimate "
                         f"({logged / GiB:.2f} GiB) but does not subtract it from the KV "
                         "cache's budget (0.20 made that the default): kvcalc counts 0, as "
                         "vLLM does")
        return
    if said:
        notes.append(f"the log says CUDA-graph memory profiling is on (VLLM_MEMORY_PROFILER_"
                     f"ESTIMATE_CUDAGRAPHS=1), which vLLM {settings.vllm_version} does not do "
                     "by default: its estimate is taken from the log")
    else:
        notes.append("the log says CUDA-graph memory profiling is off "
                     "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): nothing is subtracted for "
                     "the graphs")


def _graph_override(log: VllmLog, settings: EngineSettings) -> dict:
    said = log.graph_estimate_subtracted
    if said is None or settings.enforce_eager or said == _release_subtracts(settings):
        return {}
    if said and "cuda_graphs" in log.terms:
        return {"cuda_graph_bytes": log.terms["cuda_graphs"]}
    return {} if said else {"cuda_graph_bytes": 0}


def check_log(log: VllmLog, spec: ModelSpec, hw: Hardware, *,
              vllm_version: str | None = None) -> LogCheck:
    """kvcalc's count for the settings `log` shows, beside every figure it printed."""
    settings, notes = settings_from_log(log, spec, vllm_version=vllm_version)
    if "total" in log.terms:  # the driver's total, read off the log: the budget's base
        hw = dataclasses.replace(hw, visible_memory_bytes=log.terms["total"])
    elif not getattr(hw, "visible_memory_bytes", 0):
        notes.append(f"the log does not print the GPU's total memory; {hw.name}'s nominal "
                     "memory is used")
    cap = serving_capacity(spec, hw, settings)
    device = cap.deciding
    ours = {"total": device.total, **device.as_dict()}
    subtracted = graphs_subtracted(log, settings)
    terms = []
    for name in TERMS:
        if name not in log.terms or name not in ours:
            continue
        status = ""
        if name == "weights" and settings.weights_bytes is not None:
            status = FROM_LOG
        elif name == "cuda_graphs":
            if not subtracted:
                status = NOT_SUBTRACTED
            elif settings.cuda_graph_bytes == log.terms[name]:
                status = FROM_LOG
        terms.append(TermCheck(name, log.terms[name], ours[name], "bytes", status))
    if log.graphs_captured is not None and not subtracted:
        # Captured after the KV cache was sized, in the memory above the budget.
        terms.append(TermCheck("cuda_graphs_captured", log.graphs_captured, 0, "bytes",
                               NOT_SUBTRACTED))
    counts = []
    if log.num_gpu_blocks is not None:
        counts.append(TermCheck("num_gpu_blocks", log.num_gpu_blocks, cap.num_gpu_blocks, "blocks"))
    if log.kv_cache_tokens is not None:
        counts.append(TermCheck("kv_cache_tokens", log.kv_cache_tokens, cap.kv_cache_tokens,
                                "tokens"))
    if log.max_concurrency is not None:
        counts.append(TermCheck("max_concurrency", log.max_concurrency,
                                round(cap.max_concurrency, 2), "x"))
    enc = cap.encoder
    if log.encoder_budget is not None:
        counts.append(TermCheck("encoder_budget", log.encoder_budget,
                                enc.budget if enc else 0, "tokens"))
    if log.encoder_items is not None:
        counts.append(TermCheck("encoder_items", log.encoder_items,
                                enc.items if enc else 0, "images"))
    if log.max_model_len_fit is not None:
        counts.append(TermCheck("max_model_len_fit", log.max_model_len_fit,
                                cap.max_model_len_fit, "tokens"))
    failure = log.failure
    if not log.sized_kv_cache:
        notes.append("the log stops before vLLM sized its KV cache (no 'Available KV cache "
                     "memory', '# GPU blocks' or 'GPU KV cache size' line): only the terms "
                     "before it are compared")
    if log.refused != (not cap.fits):
        if failure is not None and failure.kind not in KV_REFUSALS + ("unknown",):
            notes.append(f"vLLM did not start ({FAILURE_LABELS[failure.kind]}), for a reason "
                         f"kvcalc's count does not cover; kvcalc says these settings "
                         f"{'would refuse' if not cap.fits else 'would start'}")
        else:
            notes.append(f"vLLM {'refused' if log.refused else 'started'}; kvcalc says it "
                         f"{'would refuse' if not cap.fits else 'would start'}")
    from kvcalc.formulas.params import param_counts

    return LogCheck(log=log, model=spec.name, settings=settings, hardware=hw.name, capacity=cap,
                    terms=tuple(terms), counts=tuple(counts), notes=tuple(notes),
                    model_params=param_counts(spec).total,
                    diagnosis=diagnose(log, settings=settings, capacity=cap))


# --------------------------------------------------------------------------------
# Why a start-up failed, and the fix
# --------------------------------------------------------------------------------
def _gib_text(value: int | None) -> str:
    return "?" if value is None else f"{value / GiB:.2f} GiB"


def _lower_util(log: VllmLog, step: float = 0.05) -> str:
    """'--gpu-memory-utilization U' a step below the log's (0.9 when it gives none)."""
    util = float(log.flags.get("gpu_memory_utilization", 0.9) or 0.9)
    return f"--gpu-memory-utilization {max(util - step, 0.1):.2f}"


def diagnose(log: VllmLog, *, settings: EngineSettings | None = None,
             capacity: Capacity | None = None) -> Diagnosis | None:
    """Why the start-up in `log` failed, as its lines give it, and the fix (None: it did
    not fail, or the log stops before anything did). `settings` and `capacity`, kvcalc's
    count for the log's settings, add what the log alone cannot say."""
    f = log.failure
    if f is None:
        return None
    fig, words = f.figures, f.words
    version = (settings.vllm_version if settings else log.vllm_version) or ""
    seqs = log.flags.get("max_num_seqs")
    if f.kind == "max_model_len_over_context":
        ctx, want = fig["context"], fig["max_model_len"]
        where = "the length its config gives" if fig.get("context_key") in (None, "None") else (
            f"{fig['context_key']} in its config.json")
        cause = (f"--max-model-len {want:,} is longer than the model's context of {ctx:,} "
                 f"tokens ({where}); vLLM refuses it before loading anything")
        fix = (f"serve at --max-model-len {ctx} or less; only if the model was trained (or "
               f"rope-scaled) past {ctx:,} tokens, set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: "
               "positions beyond its context give wrong output or NaN")
    elif f.kind == "free_memory":
        free, total, want = fig["free_bytes"], fig["total_bytes"], fig["requested_bytes"]
        held = total - free
        most = int(free * 100 // total) / 100 if total else 0.0
        cause = (f"another process holds {held / GiB:.2f} GiB of the device: only "
                 f"{free / GiB:.2f} of {total / GiB:.2f} GiB was free at start-up, less than "
                 f"the {fig['gpu_memory_utilization']} x {total / GiB:.2f} = {want / GiB:.2f} "
                 f"GiB vLLM was told to take (--gpu-memory-utilization is a share of the "
                 f"device's total, not of what is free)")
        fix = (f"stop the other process (`nvidia-smi` lists it: often an earlier vLLM still "
               f"running, or a second model on the same GPU), or lower "
               f"--gpu-memory-utilization to {most:.2f} or less, so that weights, activations "
               f"and KV cache share the {free / GiB:.2f} GiB that is free")
        if most < 0.1:
            fix = (f"stop the other process (`nvidia-smi` lists it: often an earlier vLLM "
                   f"still running, or a second model on the same GPU): {free / GiB:.2f} GiB "
                   f"free ({most:.2f} of the device) is too little to serve from")
    elif f.kind == "oom_sampler":
        n = fig.get("dummy_requests") or seqs
        cause = (f"out of memory warming up the sampler: vLLM samples {n or 'max_num_seqs'} "
                 "dummy requests at start-up (one per --max-num-seqs), and their logits (one "
                 "row of the vocabulary each, in fp32, with the sampler's copies) did not fit "
                 "in the memory left")
        fix = (f"lower --max-num-seqs (to {max(int(n) // 2, 1)}, say) or "
               f"{_lower_util(log)} to leave room for the warm-up" if n else
               f"lower --max-num-seqs or {_lower_util(log)}")
    elif f.kind == "oom_cuda_graphs":
        if settings is not None:
            after = not graphs_subtracted(log, settings)
        elif log.graph_estimate_subtracted is not None:
            after = not log.graph_estimate_subtracted
        elif log.engine == "v0" or version:
            after = log.engine == "v0" or not rules_for(version).graphs_subtracted()
        else:
            after = None
        cause = "out of memory capturing CUDA graphs: " + {
            True: f"vLLM {version or ''} captures them after sizing the KV cache, in the "
                  "memory above --gpu-memory-utilization".replace("  ", " "),
            False: "the capture took more than the CUDA-graph estimate vLLM set aside",
            None: "vLLM captures them after sizing the KV cache, in the memory above "
                  "--gpu-memory-utilization (from 0.20 it sets an estimate aside first, which "
                  "the capture then outgrew)"}[after]
        fix = (f"{_lower_util(log)} (more room above the budget for the graphs), capture "
               "fewer sizes (a lower --max-num-seqs or --max-cudagraph-capture-size), or "
               "--enforce-eager (no graphs: slower decoding)")
    elif f.kind == "oom_loading":
        cause = "out of memory loading the weights: they do not fit on one device"
        tp = log.flags.get("tensor_parallel_size", 1)
        fix = (f"spread them over more GPUs (--tensor-parallel-size {int(tp) * 2}), serve a "
               "quantized checkpoint, or free the GPU of other processes")
    elif f.kind == "oom_profile":
        cause = ("out of memory in the profile run (one forward pass of "
                 "--max-num-batched-tokens tokens, before the KV cache is sized)")
        fix = ("lower --max-num-batched-tokens (and with it the activation peak), or free the "
               "GPU of other processes")
    elif f.kind == "oom":
        cause = ("CUDA out of memory, at a step the lines given do not show (paste the log "
                 "from 'Starting to load model' to the error to say which)")
        fix = (f"{_lower_util(log)}; lower --max-num-seqs and --max-num-batched-tokens; or "
               "--enforce-eager")
    elif f.kind == "missing_model":
        name = fig.get("model") or log.model or "the model"
        what = f" ({fig['file']} is missing)" if fig.get("file") else ""
        cause = f"vLLM found no model files at {name}{what}: a wrong id or path, or no access"
        fix = ("check the Hub id (org/name, as the model's page spells it) or the path (a "
               "local folder needs config.json and the weights); download it first (`hf "
               "download NAME`); for a gated repository accept its licence and set HF_TOKEN")
    elif f.kind == "kv_cache_too_small":
        want, fit = fig["max_model_len"], fig["max_model_len_fit"]
        cause = (f"one --max-model-len {want:,} request needs more KV cache than is left"
                 + (f" ({_gib_text(log.terms['kv_cache'])} available)" if "kv_cache" in log.terms
                    else "") + f": the longest that fits is {fit:,} tokens")
        fix = (f"--max-model-len {fit} or less, or make room: raise --gpu-memory-utilization, "
               "--kv-cache-dtype fp8, or more GPUs (--tensor-parallel-size)")
    elif f.kind == "no_kv_memory":
        t = log.terms
        held = " + ".join(f"{name.replace('_', ' ')} {_gib_text(t[name])}"
                          for name in ("weights", "activation_peak", "non_torch", "cuda_graphs")
                          if name in t)
        cause = ("nothing is left for the KV cache" + (
            f": {held} fill the {_gib_text(t['budget'])} budget" if held and "budget" in t
            else ": the weights and the profile run fill the budget"))
        fix = ("raise --gpu-memory-utilization, spread the weights over more GPUs "
               "(--tensor-parallel-size), serve a quantized checkpoint, or lower "
               "--max-num-batched-tokens / --max-num-seqs (a smaller activation peak)")
    else:  # unknown
        if capacity is not None and not capacity.fits:
            cause = ("the lines given do not say why; kvcalc's count for these settings "
                     f"refuses too: {capacity.refusal}")
            fix = (f"--max-model-len {capacity.max_model_len_fit} or less"
                   if capacity.max_model_len_fit else
                   "raise --gpu-memory-utilization or add GPUs (--tensor-parallel-size)")
        else:
            cause = "the engine failed, but the lines given do not say why"
            fix = ("paste the log from its first ERROR line: the cause is printed above "
                   "'EngineCore failed to start'")
    return Diagnosis(kind=f.kind, cause=cause, fix=fix, words=words)


def failure_dict(diagnosis: Diagnosis | None, log: VllmLog) -> dict | None:
    """JSON `failure`: the cause, vLLM's words, the figures they hold and the fix."""
    if diagnosis is None:
        return None
    figures = log.failure.figures if log.failure is not None else {}
    return {"cause": diagnosis.kind, "vllm_says": diagnosis.words, "why": diagnosis.cause,
            "fix": diagnosis.fix, "figures": dict(figures)}
