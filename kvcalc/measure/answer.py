"""`kvcalc measure` as a library function: `kvcalc.measure(heads=32, kv_heads=8, ...)`
times decode attention (or a decode layer step) on this machine beside kvcalc's
prediction and returns a MeasureResult whose `as_dict()` is `kvcalc measure --format
json` (timings differ run to run; the shape and every other field are the command's).

Keyword arguments only, named as the command's flags are. A value it cannot take raises
ParameterError naming the parameter (`heads`); the command line says it as its flag.
The whole-model steps (`--step model`, `--step mixed`) and `--calibrate` stay the
command's own (kvcalc.cli.measure_model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvcalc.errors import KvcalcError, ParameterError
from kvcalc.measure.config import MeasureConfig, MeasureResult, Progress

STEPS = ("attention", "layer", "both")


def measure(*, heads: int | None = None, kv_heads: int | None = None,
            head_dim: int | None = None, d_model: int | None = None, preset: str | None = None,
            seq_len: int | Sequence[int] | None = None,
            batch: int | Sequence[int] | None = None, sweep: bool = False,
            dtype: str | None = None, device: str = "auto", impl: str = "auto",
            step: str = "attention", warmup: int | None = None, iters: int | None = None,
            compare: bool = False, cuda_graphs: bool = False, l2: str = "auto",
            cache_ceilings: bool = False, tp: int | Sequence[int] | None = None,
            progress: Progress | None = None, notice=None) -> MeasureResult | None:
    """Time decode steps on this machine beside kvcalc's prediction (needs torch).

    The attention: `heads` query heads and `kv_heads` K/V heads (counts) of `head_dim`
    elements each, or those of `preset` (a model preset's name; the counts given override
    it); `d_model` (elements) widens the layer step. The cache: `batch` sequences of
    `seq_len` tokens (None: the device's default); with `sweep` each is a sequence and
    every pair is timed, the ceilings measured once. `step`: attention, layer or both;
    `impl`: auto, all or comma-separated names (kvcalc.measure.IMPL_CHOICES); `dtype`:
    fp32, bf16 or fp16 (None: bf16 on a GPU, fp32 on a CPU); `device`: auto, cuda or cpu;
    `warmup` untimed calls and `iters` timed repetitions (counts; None: the device's
    default); `compare` adds MHA and MQA at the same query heads; `cuda_graphs` replays
    each call from a CUDA graph; `l2`: auto, rotate, flush or none; `cache_ceilings`
    reuses this device's ceilings from ~/.cache/kvcalc/ceilings.json; `tp`: tensor-
    parallel degree(s), that many torch.distributed ranks. `progress(description, done,
    total)` hears each phase, `notice(text)` what the user should know at once.

    Returns a MeasureResult (`.rows`, `.device`, `.ceilings`, `.config`; `as_dict()` is
    the command's JSON), or None on a torchrun rank other than 0.
    """
    config, seq_lens, batches = measure_config(
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, d_model=d_model, preset=preset,
        seq_len=seq_len, batch=batch, sweep=sweep, dtype=dtype, device=device, impl=impl,
        step=step, warmup=warmup, iters=iters, compare=compare, cuda_graphs=cuda_graphs,
        l2=l2, cache_ceilings=cache_ceilings, tp=tp)
    from kvcalc.measure import run, run_sweep

    if sweep:
        return run_sweep(config, seq_lens or [None], batches or [None], progress, notice)
    return run(config, progress=progress, notice=notice)


def measure_config(*, heads=None, kv_heads=None, head_dim=None, d_model=None, preset=None,
                   seq_len=None, batch=None, sweep=False, dtype=None, device="auto",
                   impl="auto", step="attention", warmup=None, iters=None, compare=False,
                   cuda_graphs=False, l2="auto", cache_ceilings=False, tp=None
                   ) -> tuple[MeasureConfig, list, list]:
    """measure's parameters checked, before anything is timed: (the MeasureConfig, the
    sweep's seq_lens, its batches)."""
    tps = [tp] if isinstance(tp, int) else list(tp or [])
    if tps and sweep:
        raise ParameterError("{tp} and {sweep} do not combine: give one {seq_len} and {batch}",
                             "tp", "sweep", "seq_len", "batch")
    seq_lens, batches = _values(seq_len, "seq_len", sweep), _values(batch, "batch", sweep)
    if step not in STEPS:
        raise ParameterError("{step} must be one of " + ", ".join(STEPS) + f", got {step!r}",
                             "step")
    config = MeasureConfig(**_model_fields(preset, heads, kv_heads, head_dim, d_model),
                           seq_len=seq_lens[0] if seq_lens else None,
                           batch=batches[0] if batches else None, dtype=_dtype_name(dtype),
                           device=device, impl=impl, step=step, warmup=warmup, iters=iters,
                           compare=compare, cuda_graphs=cuda_graphs, l2=l2,
                           ceilings_cache=_cache_path() if cache_ceilings else None,
                           tp=tuple(tps) if tps else None)
    return config, seq_lens, batches


def _values(value, name: str, sweep: bool) -> list:
    """A size as a list: [] for None, one value, or with `sweep` every value given."""
    if value is None:
        return []
    if isinstance(value, int) or not sweep:
        if not isinstance(value, int):
            raise ParameterError(f"{{{name}}} takes one value without {{sweep}}", name, "sweep")
        return [value]
    return list(value)


def _model_fields(preset, heads, kv_heads, head_dim, d_model) -> dict[str, Any]:
    """heads, kv_heads, head_dim, d_model, layers, model: the parameters over the preset's."""
    fields: dict[str, Any] = {"head_dim": 128, "layers": 1, "model": ""}
    if preset is not None:
        fields.update(_preset_fields(preset))
    elif heads is None:
        raise ParameterError("give {heads} (and {kv_heads}), or {preset} NAME",
                             "heads", "kv_heads", "preset")
    changed = []
    for name, value in (("heads", heads), ("head_dim", head_dim), ("d_model", d_model)):
        if value is not None:
            if preset is not None and value != fields[name]:
                changed.append(f"{name}={value}")
            fields[name] = value
    if changed:  # no longer the preset's attention: say so, as estimate does
        fields["model"] = f"{fields['model']}[{','.join(changed)}]"
    if kv_heads is not None:
        fields["kv_heads"] = kv_heads
    elif preset is None or fields["kv_heads"] > fields["heads"]:
        fields["kv_heads"] = fields["heads"]
    return fields


def _preset_fields(preset: str) -> dict[str, Any]:
    from kvcalc.presets import load_model

    spec = load_model(preset)
    if spec.mla is not None:
        raise KvcalcError(f"{spec.name} uses MLA: kvcalc measure times MHA/GQA/MQA attention only")
    a = spec.attention_shape  # the attention most layers have
    if a is None:
        raise KvcalcError(f"{spec.name} has no attention: kvcalc measure times attention")
    if a.v_head_dim != a.head_dim:
        raise KvcalcError(f"{spec.name} has v_head_dim {a.v_head_dim} != head_dim "
                          f"{a.head_dim}; kvcalc measure needs them equal")
    return dict(heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, d_model=spec.d_model,
                layers=spec.layers, model=spec.name)


def _dtype_name(name: str | None) -> str | None:
    if name is None:
        return None
    from kvcalc.ground.dtypes import dtype

    return dtype(name).name  # accepts aliases (bfloat16, float32, half ...)


def _cache_path():
    from kvcalc.measure.ceilings import default_cache_path

    return default_cache_path()
