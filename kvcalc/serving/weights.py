"""What every engine loads before its cache, counted once for all of them: the weights one
device of a pipeline stage holds, and the activations of one forward pass.

Physics, not policy: the same checkpoint takes the same bytes under any engine (each
loads the config's tensors in the model dtype, or as its quantized format stores them,
with the RoPE cos/sin cache). The count is kvcalc.capacity.memory's (written once, with
its sources); this module hands it the weights' description without an engine's flags.
"""

from __future__ import annotations

from kvcalc._record import record

__all__ = ["Weights", "forward_activation", "stage_weights"]


@record
class Weights:
    """How the checkpoint is stored and loaded: kvcalc.capacity.engine.EngineSettings'
    fields of the same names (the model dtype, a weight dtype or quantization, a measured
    figure in place of the count)."""

    model_dtype: str = "bf16"
    weight_dtype: str | None = None
    group_size: int | None = None
    weight_quantization: object = None
    weights_bytes: int | None = None  # measured per device: replaces the count


def _settings(weights: Weights, tp: int, pp: int):
    from kvcalc.capacity.engine import EngineSettings

    return EngineSettings(max_model_len=1, tp=tp, pp=pp, model_dtype=weights.model_dtype,
                          weight_dtype=weights.weight_dtype, group_size=weights.group_size,
                          weight_quantization=weights.weight_quantization,
                          weights_bytes=weights.weights_bytes)


def stage_weights(spec, weights: Weights, *, tp: int, pp: int = 1, stage: int = 0) -> int:
    """Bytes of weights one device of pipeline stage `stage` holds (tp-way sharded)."""
    from kvcalc.capacity.memory import stage_weight_bytes

    return stage_weight_bytes(spec, _settings(weights, tp, pp), stage)


def stage_layers(spec, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline stage (the split vLLM and SGLang share)."""
    from kvcalc.capacity.memory import pipeline_layers

    return pipeline_layers(spec.layers, pp)


def forward_activation(spec, weights: Weights, *, tokens: int, tp: int) -> int:
    """Peak activation bytes of one forward pass over `tokens` tokens on one device."""
    from kvcalc.capacity.memory import forward_activation_bytes

    return forward_activation_bytes(spec, tokens, _settings(weights, tp, 1))
