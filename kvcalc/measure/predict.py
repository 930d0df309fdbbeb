"""What `kvcalc measure` predicts for the steps it times: bytes and FLOPs, from formulas.py.

Pure integer math, no torch. Two steps:

- attention: one decode-attention call (`formulas.attention_step`): K and V at
  seq_len tokens read once, q read, o written.
- layer: Shazeer's incremental self-attention step (Shazeer 2019 sec. 2.4) for
  one layer: x -> fused q,k,v projection -> write the new token's k, v into the
  cache -> attention over seq_len positions (the new one included) -> output
  projection. No biases, norms or RoPE: the bare block. Bytes as
  `formulas.decode_step` counts them for one layer without the MLP: weights
  once, KV read at seq_len, one token's K/V written, activations in and out of
  each matmul plus q and o of the attention.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcalc.errors import KvcalcError
from kvcalc.formulas import (
    layer_matmuls,
    attention_params,
    attention_step,
    kv_bytes_per_token_per_layer,
)
from kvcalc.spec import DType, ModelSpec, dtype as _dtype

STEPS = ("attention", "layer")


@dataclass(frozen=True)
class StepPrediction:
    """Minimum traffic and FLOPs of one timed call, with the tensors it allocates."""

    step: str  # "attention" or "layer"
    flops: int
    bytes_breakdown: dict[str, int]  # what must cross the memory bus at least once
    kv_cache_bytes: int  # K and V buffers as allocated (batch x seq_len x kv_heads x ...)
    weight_bytes: int  # projection weights (0 for the attention step)
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(self.bytes_breakdown.values())

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes


def block_spec(heads: int, kv_heads: int, head_dim: int, d_model: int | None = None,
               name: str = "measure") -> ModelSpec:
    """A one-layer ModelSpec for the bare attention block (validates the sizes)."""
    return ModelSpec(name=name, layers=1, d_model=d_model or heads * head_dim, heads=heads,
                     kv_heads=kv_heads, head_dim=head_dim, d_ff=1, vocab=1)


def attention_prediction(batch: int, seq_len: int, heads: int, kv_heads: int, head_dim: int,
                         dtype: DType | str) -> StepPrediction:
    """One decode-attention call (formulas.attention_step)."""
    cost = attention_step(batch, seq_len, heads, kv_heads, head_dim, dtype)
    return StepPrediction(
        step="attention",
        flops=cost.flops,
        bytes_breakdown={"kv_read": cost.kv_bytes, "q": cost.q_bytes, "o": cost.o_bytes},
        kv_cache_bytes=cost.kv_bytes,
        weight_bytes=0,
    )


def layer_prediction(spec: ModelSpec, batch: int, seq_len: int,
                     dtype: DType | str) -> StepPrediction:
    """One incremental self-attention layer step for `batch` sequences at `seq_len`.

    Weights, cache and activations all in `dtype`. FLOPs: 2 x fan_in x fan_out per
    token for the fused qkv and the output projection, plus the attention over
    seq_len positions (formulas.attention_step).
    """
    if spec.mla is not None:
        raise KvcalcError(f"{spec.name} uses MLA; kvcalc measure times MHA/GQA/MQA only")
    dt = dtype if isinstance(dtype, DType) else _dtype(dtype)
    attn = attention_step(batch, seq_len, spec.heads, spec.kv_heads, spec.head_dim, dt,
                          spec.v_head_dim)
    weights = dt.nbytes(sum(attention_params(spec).values()))
    matmuls = layer_matmuls(spec)
    proj_flops = batch * sum(2 * i * o * c for i, o, c in matmuls)
    act_bytes = dt.nbytes(batch * sum((i + o) * c for i, o, c in matmuls))
    kv_write = batch * kv_bytes_per_token_per_layer(spec, dt)
    return StepPrediction(
        step="layer",
        flops=proj_flops + attn.flops,
        bytes_breakdown={
            "weights": weights,
            "kv_read": attn.kv_bytes,
            "kv_write": kv_write,
            "activations": act_bytes + attn.q_bytes + attn.o_bytes,
        },
        kv_cache_bytes=attn.kv_bytes,
        weight_bytes=weights,
        extra={"projection_flops": proj_flops, "attention_flops": attn.flops},
    )


def predict(step: str, spec: ModelSpec, batch: int, seq_len: int,
            dtype: DType | str) -> StepPrediction:
    """The prediction for `step` ("attention" or "layer")."""
    if step == "attention":
        return attention_prediction(batch, seq_len, spec.heads, spec.kv_heads, spec.head_dim, dtype)
    if step == "layer":
        return layer_prediction(spec, batch, seq_len, dtype)
    raise KvcalcError(f"step must be one of {', '.join(STEPS)}, got {step!r}")
