"""Measure decode attention on this machine next to what kvcalc predicts for it.

    from kvcalc.measure import MeasureConfig, run
    result = run(MeasureConfig(heads=32, kv_heads=8, compare=True))
    result.rows      # one dict per (step, kv_heads, impl); column names are public
    result.device    # name, type, cache size, memory, torch version
    result.ceilings  # measured copy / read bandwidth and matmul FLOP/s

torch is imported only when a measurement runs (the `measure` extra:
pip install 'kvcalc[measure]'); importing this package does not need it.
"""

from __future__ import annotations

from kvcalc.errors import KvcalcError
from kvcalc.measure.config import (
    DEFAULTS,
    IMPL_CHOICES,
    IMPLS,
    MeasureConfig,
    MeasureResult,
    Progress,
)
from kvcalc.measure.mixed import MixedConfig, MixedPrediction, MixedResult, mixed_prediction
from kvcalc.measure.predict import StepPrediction, attention_prediction, layer_prediction, predict

__all__ = [
    "DEFAULTS",
    "IMPLS",
    "IMPL_CHOICES",
    "MeasureConfig",
    "MeasureResult",
    "MixedConfig",
    "MixedPrediction",
    "MixedResult",
    "Progress",
    "StepPrediction",
    "attention_prediction",
    "layer_prediction",
    "mixed_prediction",
    "predict",
    "require_torch",
    "run",
    "run_mixed",
    "run_sweep",
    "TORCH_HINT",
]

TORCH_HINT = "pip install 'kvcalc[measure]'"


def require_torch():
    """The torch module, or a KvcalcError naming the extra that installs it."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise KvcalcError(f"kvcalc measure needs PyTorch, which is not installed: "
                              f"{TORCH_HINT}") from None
        raise KvcalcError(f"PyTorch is installed but cannot load: it needs {e.name!r}, "
                          "which is missing") from None
    except (ImportError, OSError) as e:
        # Installed but not loadable: a CUDA build under an address-space limit (ulimit
        # -v) cannot map its libraries ("failed to map segment from shared object").
        why = " ".join(str(e).split())[:160]
        hint = (" (an address-space limit, ulimit -v, too small for it)"
                if "map segment" in why or "Cannot allocate memory" in why else "")
        raise KvcalcError(f"PyTorch is installed but cannot load: {why}{hint}") from None
    return torch


def run(config: MeasureConfig, progress: Progress | None = None, **kwargs) -> MeasureResult:
    """Run the measurement `config` describes; see kvcalc.measure.runner.run."""
    require_torch()
    if config.tp is not None:
        from kvcalc.measure.tp import run_tp

        return run_tp(config, progress, kwargs.get("notice"))
    from kvcalc.measure.runner import run as _run

    return _run(config, progress=progress, **kwargs)


def run_sweep(config: MeasureConfig, seq_lens: list[int], batches: list[int],
              progress: Progress | None = None, notice=None) -> MeasureResult:
    """`run` over a (seq_len x batch) grid, ceilings measured once; see runner.run_sweep."""
    require_torch()
    from kvcalc.measure.runner import run_sweep as _run_sweep

    return _run_sweep(config, seq_lens, batches, progress, notice)


def run_mixed(config: MixedConfig, progress: Progress | None = None,
              notice=None) -> MixedResult:
    """One served scheduler step measured: `config.batch` decode tokens with a chunk of
    `config.prefill_tokens` prompt tokens in the same forward pass, beside kvcalc's
    prediction at ceilings measured in the same run; see kvcalc.measure.mixed_step."""
    require_torch()
    from kvcalc.measure.mixed_step import run_mixed as _run_mixed

    return _run_mixed(config, progress, notice)
