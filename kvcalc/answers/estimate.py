"""`kvcalc estimate` as the command runs it, and kvcalc.estimate: `estimate(model=...,
gpu=..., ...)` returns the Estimate whose `as_dict()` is `kvcalc estimate --format json`,
or with `compare` the Comparison of its MHA, GQA and MQA variants (`--compare --format
json`). Keyword arguments only, named as the command's flags are, at the command's
defaults; a value it cannot take raises ParameterError naming the parameter.
kvcalc.figures(MODEL, ...) is the lower-level form, positional, at Python's defaults (no
device unless named, the roofline unless an engine is named).
"""

from __future__ import annotations

import os
import re

from kvcalc.errors import KvcalcError, ParameterError, literal
from kvcalc.ground.record import record


@record
class Comparison:
    """MHA, GQA and MQA of one model, MHA first: `as_dict()` is `kvcalc estimate
    --compare --format json`, `as_rows()` its CSV rows."""

    estimates: tuple

    def as_dict(self) -> dict:
        base = self.estimates[0]
        return {"variants": [e.as_dict() for e in self.estimates],
                "reductions_vs_mha": [reductions(base, e) for e in self.estimates[1:]]}

    def as_rows(self) -> list[dict]:
        return [{**e.as_row(), **reductions(self.estimates[0], e)} for e in self.estimates]


def reductions(base, other) -> dict:
    """How many times smaller `other` makes each quantity than `base` (MHA)."""
    out = {
        "kv_bytes_reduction": base.cache.bytes / other.cache.bytes,
        "params_reduction": base.params.total / other.params.total,
        "decode_bytes_reduction": base.decode.bytes / other.decode.bytes,
        "intensity_gain": other.decode.arithmetic_intensity / base.decode.arithmetic_intensity,
    }
    if base.roofline is not None:
        out["roofline_speedup"] = base.roofline.time_s / other.roofline.time_s
    return out


def estimate(*, model, seq_len: int | None = None, batch: int = 1, kv_dtype="bf16",
             weight_dtype=None, group_size: int | None = None, tp: int = 1,
             gpu="h100-sxm", prompt_len: int | None = None, mfu: float | str | None = None,
             bandwidth_efficiency: float | str | None = None, engine: str | None = None,
             compare: bool = False, kv_heads: int | None = None,
             data_parallel_size: int | None = None, enable_expert_parallel: bool = False,
             limit_mm_per_prompt: str | None = None, kv_scale_bytes: int = 0,
             encoder_seq_len: int | None = None, memory_fraction: float | None = None,
             reserve_bytes: int | None = None):
    """KV cache, parameters, decode time and what fits, for one model, as `kvcalc
    estimate` counts them: an Estimate whose `as_dict()` is `kvcalc estimate MODEL
    --format json` with the same flags (`seq_len=8192` is `--seq-len 8192`), its defaults
    the command's (an H100 SXM, timed and counted as vLLM runs it).

    `model`: a ModelSpec or MODEL (a preset, Hub id, folder or config file), or a
    function returning the ModelSpec, called once the device is checked; `gpu`: a
    Hardware, a hardware preset or YAML file, or None / "none" (no roofline, no fit).
    `kv_dtype` and `weight_dtype`: dtype names ("bf16", "fp8", "int4", ...; `weight_dtype`
    None reads the weights as the checkpoint stores them). Lengths in tokens: `seq_len`
    (default the model's max context, or 4096), `prompt_len` (default seq_len) and
    `encoder_seq_len`. `batch` in sequences; `tp` and `data_parallel_size` in devices;
    `group_size` in weights per scale; `kv_scale_bytes` in bytes per token per K/V head;
    `reserve_bytes` in bytes per device; `memory_fraction`, `mfu` and
    `bandwidth_efficiency` shares in (0, 1]. `engine` ("vllm@0.21.0", "sglang",
    "llama.cpp", "roofline", ...) times the tokens and, for a serving engine, counts the
    memory (default: vLLM on a GPU). `compare`: the MHA, GQA and MQA variants (GQA at
    `kv_heads`) as a Comparison. `data_parallel_size`, `enable_expert_parallel` and
    `limit_mm_per_prompt` are vLLM's flags of those names, for its memory count.
    """
    from kvcalc.answers import speed

    ref = speed.memory_engine(engine)  # whose memory count (None: vLLM 0.33's)
    speed_engine = speed.engine_option(engine, mfu, bandwidth_efficiency, speed.DEFAULT)
    mfu, bandwidth_efficiency = speed.shares(mfu, bandwidth_efficiency)
    memory = _memory_count(ref, _layout(ref, data_parallel_size, enable_expert_parallel),
                           limit_mm_per_prompt)
    hardware = _hardware(gpu)
    speed_engine = speed.resolve(speed_engine, hardware)  # the device's default engine
    if hardware is None and speed_engine is not None:
        raise ParameterError("{engine} times tokens on a device: give {gpu} NAME",
                             "engine", "gpu")
    return _count(model, hardware, device_memory(hardware, memory_fraction, reserve_bytes),
                  compare=compare, kv_heads=kv_heads, seq_len=seq_len, batch=batch,
                  kv_dtype=kv_dtype, weight_dtype=weight_dtype, tp=tp,
                  scale_bytes=kv_scale_bytes, encoder_seq_len=encoder_seq_len,
                  prompt_len=prompt_len, group_size=group_size,
                  options=dict(memory, mfu=mfu, bandwidth_efficiency=bandwidth_efficiency,
                               engine=speed_engine))


def _count(model, hardware, memory: tuple, *, compare: bool, kv_heads, seq_len,
           options: dict, **workload):
    from kvcalc.estimate import attention_variants, estimate as run_estimate, workload_for
    from kvcalc.workload import Memory

    spec = _model(model)
    length = seq_len if seq_len is not None else spec.max_context or 4096
    specs = attention_variants(spec, kv_heads) if compare else [spec]
    fraction, reserve = memory
    memory = None if hardware is None else Memory(hardware=hardware, fraction=fraction,
                                                  reserve_bytes=reserve)
    ests = [run_estimate(s, workload_for(s, seq_len=length, **workload), memory=memory,
                         **options) for s in specs]
    return Comparison(tuple(ests)) if compare else ests[0]


def _model(model):
    if callable(model):  # resolved once the device is checked (the command's --preset ...)
        return model()
    if isinstance(model, (str, os.PathLike)):  # a path as a Path as well
        from kvcalc.model_source import resolve_model

        return resolve_model(model)
    return model


def _hardware(gpu):
    if isinstance(gpu, str):
        if gpu.lower() == "none":
            return None
        from kvcalc.presets import hardware_named

        return hardware_named(gpu)
    return gpu


def device_memory(hardware, memory_fraction, reserve_bytes) -> tuple:
    """(memory_fraction, reserve_bytes), checked; refused without a device, where no
    device memory exists for them to shape (estimate's and sweep's, one rule)."""
    if hardware is None and (memory_fraction is not None or reserve_bytes is not None):
        names = [n for n, v in (("memory_fraction", memory_fraction),
                                ("reserve_bytes", reserve_bytes)) if v is not None]
        verb = "apply" if len(names) > 1 else "applies"
        raise ParameterError(" and ".join("{" + n + "}" for n in names) + f" {verb} to a "
                             "device's memory, and {gpu} none has none: name a device with "
                             "{gpu}, or leave it out", *names, "gpu")
    fraction = 1.0 if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise ParameterError("{memory_fraction} must be in (0, 1], got " + literal(fraction),
                             "memory_fraction")
    return fraction, reserve_bytes or 0


def _layout(ref, data_parallel_size, enable_expert_parallel) -> dict:
    """data_parallel_size and enable_expert_parallel as EngineSettings' dp and
    enable_expert_parallel for vLLM's count (`ref` None or vLLM); refused for another
    engine's."""
    given = {"dp": data_parallel_size, "enable_expert_parallel": enable_expert_parallel or None}
    if ref is not None and ref.name != "vllm":
        if ref.name == "sglang" and data_parallel_size is not None:
            raise ParameterError("{data_parallel_size} with {engine} " + literal(ref.name)
                                 + ": estimate counts " + literal(ref.title) + " at its "
                                 "defaults; fit takes its layout ({dp_size})",
                                 "data_parallel_size", "engine", "dp_size")
        _check_owners(ref.name, given)
    return {k: v for k, v in given.items() if v is not None}


def _memory_count(ref, layout: dict, limit_mm_per_prompt) -> dict:
    """The estimate's memory count: vLLM's release settings with the layout, or another
    engine's count (`ref`)."""
    if limit_mm_per_prompt is not None:
        _check_owners(ref.name if ref else "vllm", {"limit_mm_per_prompt": limit_mm_per_prompt})
        layout = {**layout, "limit_mm_per_prompt": limit_mm_per_prompt}
    if ref is not None and ref.name == "vllm":
        from kvcalc.serving.vllm import release_settings

        return {"serving": {**release_settings(ref.release), **layout}}
    if ref is not None:
        return {"memory_engine": ref}
    return {"serving": layout} if layout else {}


def _check_owners(engine: str, given: dict) -> None:
    """kvcalc.serving.flags.check_owners, its refusal a ParameterError naming the
    parameters (which the command line says as its flags)."""
    from kvcalc.serving.flags import check_owners

    try:
        check_owners(engine, given, lambda name: f"\0{name}\1")
    except KvcalcError as e:
        text = str(e)
        names = re.findall("\0(\\w+)\1", text)
        raise ParameterError(re.sub("\0(\\w+)\1", r"{\1}", literal(text)), *names) from None
