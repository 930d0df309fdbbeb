"""A vLLM start-up log beside kvcalc's count: the settings the log shows, run through
`serving_capacity`, term by term (`kvcalc check LOG`).

A term "differs" when kvcalc's figure is off the log's by more than DIFF_SHARE of it and
more than the log's own rounding (0.01 GiB printed, so half of that either way) plus
DIFF_FLOOR; the one that differs most is named first.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field

from kvcalc._record import record
from kvcalc.capacity.engine import GiB, EngineSettings, parse_version
from kvcalc.capacity.serving import Capacity, serving_capacity
from kvcalc.capacity.vllmlog import TERMS, VllmLog
from kvcalc.errors import KvcalcError
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["DIFF_FLOOR", "DIFF_SHARE", "LogCheck", "TermCheck", "check_log", "gpu_preset_for",
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


@record
class TermCheck:
    """One figure the log printed, beside kvcalc's (bytes, or tokens/blocks)."""

    name: str
    logged: int | float
    kvcalc: int | float
    unit: str  # "bytes", "tokens", "blocks", "x"

    @property
    def difference(self) -> float:
        return self.kvcalc - self.logged

    @property
    def differs(self) -> bool:
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
                         "gpu_memory_utilization": str(self.settings.gpu_memory_utilization),
                         "tp": self.settings.tp, "pp": self.settings.pp,
                         "max_num_batched_tokens": cap.max_num_batched_tokens,
                         "max_num_seqs": cap.max_num_seqs, "block_size": cap.block_size,
                         "kv_dtype": self.settings.kv_dtype,
                         "enforce_eager": self.settings.enforce_eager},
            "terms": {t.name: {"logged_bytes": t.logged, "kvcalc_bytes": t.kvcalc}
                      for t in self.terms},
            "kv_cache_tokens": kv_tokens,
            **counts,
            "refused": {"logged": log.refused, "kvcalc": not cap.fits},
            "refusal": {"logged": log.refusal, "kvcalc": cap.refusal},
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
        raise KvcalcError("the log does not print vLLM's version (no 'Initializing a V1 LLM "
                          "engine (vX)' or 'version X' line): give --vllm-version")
    if vllm_version is not None and log.vllm_version is not None:
        if parse_version(vllm_version) != parse_version(log.vllm_version):
            notes.append(f"--vllm-version {vllm_version} given; the log says "
                         f"{log.vllm_version}, which is used")
    minor = parse_version(version)
    engine = log.engine or ("v0" if minor < (8, 0) else "v1")
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
    if f.get("enforce_eager") is True:
        kw["enforce_eager"] = True
    if isinstance(f.get("enable_chunked_prefill"), bool):
        kw["chunked_prefill"] = f["enable_chunked_prefill"]
    if isinstance(f.get("enable_prefix_caching"), bool):
        kw["prefix_caching"] = f["enable_prefix_caching"]
    if "kv_cache_dtype" in f:
        kw["kv_dtype"] = _dtype(f["kv_cache_dtype"], "--kv-cache-dtype")
    if "dtype" in f and _dtype(f["dtype"], "--dtype") not in ("auto", "fp8"):
        kw["model_dtype"] = _dtype(f["dtype"], "--dtype")
    if str(f.get("quantization", "")).lower() == "fp8":
        kw["weight_dtype"] = "fp8"
    if f.get("sampler") == "flashinfer":  # the log's own sampler line
        kw["sampler"] = "flashinfer"
    elif f.get("sampler") == "native":
        kw["sampler"] = "sort" if minor < (17, 0) else "triton"
    return EngineSettings(**kw), notes


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
    terms = tuple(TermCheck(name, log.terms[name], ours[name], "bytes")
                  for name in TERMS if name in log.terms and name in ours)
    counts = []
    if log.num_gpu_blocks is not None:
        counts.append(TermCheck("num_gpu_blocks", log.num_gpu_blocks, cap.num_gpu_blocks, "blocks"))
    if log.kv_cache_tokens is not None:
        counts.append(TermCheck("kv_cache_tokens", log.kv_cache_tokens, cap.kv_cache_tokens,
                                "tokens"))
    if log.max_concurrency is not None:
        counts.append(TermCheck("max_concurrency", log.max_concurrency,
                                round(cap.max_concurrency, 2), "x"))
    if log.max_model_len_fit is not None:
        counts.append(TermCheck("max_model_len_fit", log.max_model_len_fit,
                                cap.max_model_len_fit, "tokens"))
    if not log.sized_kv_cache:
        notes.append("the log stops before vLLM sized its KV cache (no 'Available KV cache "
                     "memory', '# GPU blocks' or 'GPU KV cache size' line): only the terms "
                     "before it are compared")
    if log.refused != (not cap.fits):
        notes.append(f"vLLM {'refused' if log.refused else 'started'}; kvcalc says it "
                     f"{'would refuse' if not cap.fits else 'would start'}")
    from kvcalc.formulas.params import param_counts

    return LogCheck(log=log, model=spec.name, settings=settings, hardware=hw.name, capacity=cap,
                    terms=terms, counts=tuple(counts), notes=tuple(notes),
                    model_params=param_counts(spec).total)
