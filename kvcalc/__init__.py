"""kvcalc: exact KV-cache, parameter and decode-step math, and measurements that check it.

The public Python API, re-exported. Models and devices are given as objects
(ModelSpec, Hardware) or by name (a model as `kvcalc estimate MODEL` takes it: a preset,
a Hub id, a model folder or a config file); `ModelSpec.uniform(...)` builds a model whose
layers are alike, with the layer kinds `Latent` (MLA) and `MoE` for its attention and
experts:

    >>> import kvcalc
    >>> kvcalc.kv_cache("gpt3", seq_len=2048, kv_dtype="fp16").bytes
    9663676416
    >>> est = kvcalc.estimate(model="llama3-8b", seq_len=8192)
    >>> est.fits, est.as_dict()["kv_cache_bytes"]
    (True, 1073741824)

Each command is a function taking its flags by keyword, whose record's `as_dict()` is the
command's `--format json` (kvcalc/answers): `est` above is `kvcalc estimate llama3-8b
--seq-len 8192`, and so are fit, plan, bench, check, sweep and measure.
`kvcalc.figures(model, seq_len, ...)` is the estimate's lower-level form: positional,
no device unless named, timed on the roofline unless an engine is named.

No torch, pandas or rich is imported here, and the modules behind the names are
imported on first use (PEP 562), so `import kvcalc.cli` stays quick.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import TYPE_CHECKING, Any

from kvcalc.errors import KvcalcError


class _Package(types.ModuleType):
    """kvcalc itself. Importing a submodule binds it on its package, and the submodules
    kvcalc.estimate, kvcalc.floor, kvcalc.measure and kvcalc.plan would so replace the
    functions `estimate`, `floor`, `measure` and `plan` on their first import: the package
    keeps the functions (the modules are sys.modules["kvcalc.estimate"], ...). So
    `import kvcalc` imports nothing heavy, and the CLI starts its work before any model
    code loads (kvcalc/cli/__init__.py)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (name in ("estimate", "floor", "measure", "plan")
                and isinstance(value, types.ModuleType)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__version__ = "0.1.0"

# name -> module it comes from, imported when first asked for
_LAZY = {
    "Estimate": "kvcalc.estimate",
    # `kvcalc estimate` as a function (kvcalc/answers/estimate.py), keyword-only
    "estimate": "kvcalc.answers.estimate",
    "Comparison": "kvcalc.answers.estimate",
    "attention_step": "kvcalc.formulas.attention",
    "decode_step": "kvcalc.formulas.step",
    "kv_bytes_per_token_per_layer": "kvcalc.formulas.cache",
    "kv_heads_per_device": "kvcalc.formulas.cache",
    "shazeer_ratio": "kvcalc.formulas.attention",
    "image_tokens": "kvcalc.formulas.images",
    "max_image_tokens": "kvcalc.formulas.images",
    "decode_roofline": "kvcalc.speed.roofline",
    "DTYPES": "kvcalc.ground.dtypes",
    "Latent": "kvcalc.layers",
    "DType": "kvcalc.ground.dtypes",
    "Hardware": "kvcalc.spec",
    "ModelSpec": "kvcalc.spec",
    "MoE": "kvcalc.layers",
    "dtype": "kvcalc.ground.dtypes",
    "load_model": "kvcalc.presets",
    "load_hardware": "kvcalc.presets",
    "Memory": "kvcalc.workload",
    "Workload": "kvcalc.workload",
    "FitAnswer": "kvcalc.answers.fit",
    "ParameterError": "kvcalc.errors",
    # kvcalc check and kvcalc sweep (the package kvcalc.sweep, called, is the function)
    "check": "kvcalc.answers.check",
    "CheckAnswer": "kvcalc.answers.check",
    "sweep": "kvcalc.sweep",
    "SweepAnswer": "kvcalc.sweep.answer",
}
_LAZY.update(measure="kvcalc.measure.answer", MeasureResult="kvcalc.measure.config")

# `kvcalc plan` and `kvcalc bench` as functions (kvcalc/answers): keyword-only, returning
# records whose as_dict() is the command's JSON
_LAZY.update({"plan": "kvcalc.answers.plan", "PlanAnswer": "kvcalc.answers.plan",
              "bench": "kvcalc.answers.bench", "BenchAnswer": "kvcalc.answers.bench"})

__all__ = sorted([*_LAZY, "KvcalcError", "__version__", "attention_variants", "figures", "fit",
                  "floor", "kv_cache", "param_counts", "schema"])

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from kvcalc.estimate import Estimate
    from kvcalc.answers.estimate import Comparison, estimate
    from kvcalc.formulas.attention import attention_step, shazeer_ratio
    from kvcalc.formulas.cache import kv_bytes_per_token_per_layer, kv_heads_per_device
    from kvcalc.formulas.step import decode_step
    from kvcalc.presets import load_hardware, load_model
    from kvcalc.speed.roofline import decode_roofline
    from kvcalc.ground.dtypes import DTYPES, DType, dtype
    from kvcalc.layers import Latent, MoE
    from kvcalc.spec import Hardware, ModelSpec
    from kvcalc.workload import Memory, Workload
    from kvcalc.answers.fit import FitAnswer
    from kvcalc.errors import ParameterError
    from kvcalc.answers.check import CheckAnswer, check
    from kvcalc.sweep.answer import SweepAnswer
    from kvcalc.answers.plan import PlanAnswer, plan
    from kvcalc.answers.bench import BenchAnswer, bench
    from kvcalc.measure.answer import measure
    from kvcalc.measure.config import MeasureResult


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _model(model):
    """A ModelSpec, or MODEL as the command line takes it: a preset's name ('llama3-8b',
    any case), a Hub id ('org/name', 'org/name@revision'), a model folder or a config
    file (a str or a path; kvcalc.model_source says in which order)."""
    if isinstance(model, (str, os.PathLike)):
        from kvcalc.model_source import resolve_model

        return resolve_model(model)
    return model


def _hardware(hardware):
    """A Hardware, a hardware preset's name ('h100-sxm'), or None / 'none'."""
    if isinstance(hardware, str):
        if hardware.strip().lower() == "none":
            return None
        from kvcalc.presets import load_hardware

        return load_hardware(hardware)
    return hardware


def figures(model, seq_len: int | None = None, batch: int = 1, kv_dtype="bf16",
            weight_dtype=None, tp: int = 1, hardware=None, scale_bytes: int = 0,
            encoder_seq_len: int | None = None, memory_fraction: float | str = 1,
            reserve_bytes: int = 0, *, prompt_len: int | None = None, mfu: float | str = "0.5",
            bandwidth_efficiency: float | str = "0.8", group_size: int | None = None,
            engine: str | None = None):
    """The estimate's figures at Python's defaults, as an Estimate: the lower-level form
    of `estimate(model=...)` (`kvcalc estimate`), positional, for objects and grids.

    `model` is a ModelSpec or MODEL (a preset, Hub id, folder or config file); `hardware`
    a Hardware, a preset name or None (no roofline, no fit); `seq_len` defaults to the model's max context (or 4096);
    `weight_dtype` None reads the weights as the config stores them (else every matrix
    in it, with scales per `group_size` for int4, int8, fp8, mxfp4 and nvfp4). With
    hardware: TTFT for `batch` prompts of `prompt_len` tokens (default seq_len) and TPOT
    at seq_len, at the stated MFU and bandwidth efficiency, or as `engine` ('llama.cpp',
    'vllm@0.21.0', ...) runs them.

    Units: `seq_len`, `prompt_len` and `encoder_seq_len` in tokens; `batch` in sequences,
    `tp` in devices, `group_size` in weights per scale; `scale_bytes` in bytes per token
    per K/V head, `reserve_bytes` in bytes per device; `memory_fraction`, `mfu` and
    `bandwidth_efficiency` as shares in (0, 1]. Any parameter may be given by keyword.
    Unlike the command (and `estimate(model=...)`), no device unless `hardware` is named,
    the roofline's time unless an `engine` is, and always vLLM's memory count:
    `figures(MODEL, hardware="h100-sxm", engine="vllm").as_dict()` is `kvcalc estimate
    MODEL --format json`.
    """
    from kvcalc.estimate import estimate as _estimate, workload_for
    from kvcalc.workload import Memory

    spec = _model(model)
    if seq_len is None:
        seq_len = spec.max_context or 4096
    hw = _hardware(hardware)
    workload = workload_for(spec, seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype, tp=tp, scale_bytes=scale_bytes,
                            encoder_seq_len=encoder_seq_len, prompt_len=prompt_len,
                            group_size=group_size)
    memory = None if hw is None else Memory(hardware=hw, fraction=memory_fraction,
                                            reserve_bytes=reserve_bytes)
    eng = None
    if engine is not None:
        from kvcalc.engines import load_engine

        eng = load_engine(engine)[0] if isinstance(engine, str) else engine
    return _estimate(spec, workload, memory=memory, mfu=mfu,
                     bandwidth_efficiency=bandwidth_efficiency, engine=eng)


def kv_cache(model, seq_len: int, batch: int = 1, kv_dtype="bf16", tp: int = 1,
             scale_bytes: int = 0, encoder_seq_len: int | None = None):
    """The KV cache of `batch` sequences at `seq_len` tokens (bytes as exact ints);
    `model` is a ModelSpec or MODEL (a preset, Hub id, folder or config file)."""
    from kvcalc.formulas.cache import kv_cache as _kv_cache

    return _kv_cache(_model(model), seq_len, batch, kv_dtype, tp, scale_bytes, encoder_seq_len)


def param_counts(model):
    """Parameters matrix by matrix (`.total`, `.attention`, `.breakdown`); `model` is a
    ModelSpec or MODEL (a preset, Hub id, folder or config file)."""
    from kvcalc.formulas.params import param_counts as _param_counts

    return _param_counts(_model(model))


def floor(model, hardware, seq_len: int, batch: int = 1, weight_dtype=None, kv_dtype="bf16",
          tp: int = 1, scale_bytes: int = 0, memory_fraction: float | str = 1,
          reserve_bytes: int = 0, encoder_seq_len: int | None = None):
    """The floor: what fits on `tp` devices after the weights (weights + KV only; the
    verdict, vLLM's count, is `fit(...)` or `estimate(model=...).verdict`). `weight_dtype` None
    reads the weights as the config stores them (its quantization_config), as estimate
    does; the model as a ModelSpec or MODEL (a preset, Hub id, folder or config file), the
    hardware as a Hardware or a preset name."""
    from kvcalc.floor import fit as _fit
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.workload import Memory

    hw = _hardware(hardware)
    if hw is None:
        raise KvcalcError("floor needs a device: a Hardware or a hardware preset name")
    spec = _model(model)
    workload = workload_for(spec, seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
                            weight_dtype=weight_dtype, tp=tp, scale_bytes=scale_bytes,
                            encoder_seq_len=encoder_seq_len)
    return _fit(spec, workload,
                memory=Memory(hardware=hw, fraction=memory_fraction, reserve_bytes=reserve_bytes),
                stored=stored_weights(spec, workload.quantization, tp))


def fit(**parameters):
    """`kvcalc fit` from Python: keyword arguments only, named as the command's flags are
    (max_model_len=32768, gpu_memory_utilization=0.95, ttft_ms=500, ...; units in the
    names: kv_cache_memory_bytes, reserve_bytes; engine="sglang" or "tensorrt-llm" with
    that engine's own flags, mem_fraction_static="0.8", max_batch_size=64), returning a
    FitAnswer whose `.as_dict()` is `kvcalc fit --format json` exactly and `.fits` the
    verdict. Every parameter:
    kvcalc.answers.fit.fit. A value it cannot take raises ParameterError naming the
    parameter.

        >>> import kvcalc
        >>> kvcalc.fit(model="llama3.1-8b", gpu="rtx3090", max_model_len=20000).fits
        True
    """
    from kvcalc.answers.fit import fit as _fit

    return _fit(**parameters)


def attention_variants(model, kv_heads: int | None = None):
    """MHA, GQA and MQA of the same model (a ModelSpec or MODEL, as figures takes it)."""
    from kvcalc.estimate import attention_variants as _variants

    return _variants(_model(model), kv_heads)


def schema(command: str) -> dict:
    """The JSON Schema (draft 2020-12) of `kvcalc COMMAND --format json`, the record its
    function returns as `as_dict()`: "estimate", "fit", "check", "sweep" (the row list),
    "plan" or "bench"; every property typed, with its unit. Read from
    kvcalc/schemas/COMMAND.json (a fresh dict); `kvcalc schema COMMAND` prints it."""
    from kvcalc.schemas import schema as _schema

    return _schema(command)
