"""What `kvcalc measure` predicts for the steps it times: bytes and FLOPs, as the layer kind
it runs (kvcalc.layers.Attention) counts them.

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

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import DType, dtype as _dtype
from kvcalc.formulas.attention import attention_layer, attention_step
from kvcalc.layers import Attention

STEPS = ("attention", "layer")


@record
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


@record
class Block:
    """The bare attention block kvcalc measure times: one full-attention layer kind
    (kvcalc.layers.Attention, which answers every byte and FLOP question) and the
    model width its projections read and write."""

    attention: Attention
    d_model: int

    @property
    def heads(self) -> int:
        return self.attention.heads

    @property
    def kv_heads(self) -> int:
        return self.attention.kv_heads

    @property
    def head_dim(self) -> int:
        return self.attention.head_dim


def block(heads: int, kv_heads: int, head_dim: int, d_model: int | None = None) -> Block:
    """The block of `heads` query heads over `kv_heads` K/V heads (d_model: heads x
    head_dim unless given), its sizes validated as a model's would be."""
    return Block(attention_layer(heads, kv_heads, head_dim, d_model=d_model),
                 d_model or heads * head_dim)


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


def layer_prediction(blk: Block, batch: int, seq_len: int,
                     dtype: DType | str) -> StepPrediction:
    """One incremental self-attention layer step for `batch` sequences at `seq_len`.

    Weights, cache and activations all in `dtype`. FLOPs: 2 x fan_in x fan_out per
    token for the fused qkv and the output projection, plus the attention over
    seq_len positions (formulas.attention_step). The layer kind answers each term.
    """
    dt = dtype if isinstance(dtype, DType) else _dtype(dtype)
    mixer, d = blk.attention, blk.d_model
    attn = attention_step(batch, seq_len, mixer.heads, mixer.kv_heads, mixer.head_dim, dt,
                          mixer.v_head_dim)
    weights = dt.nbytes(sum(mixer.params(d).values()))
    matmuls = mixer.matmuls(d)
    proj_flops = batch * sum(2 * i * o for i, o in matmuls)
    act_bytes = dt.nbytes(batch * sum(i + o for i, o in matmuls))
    kv_write = batch * mixer.token_bytes(dt)
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


def predict(step: str, blk: Block, batch: int, seq_len: int,
            dtype: DType | str) -> StepPrediction:
    """The prediction for `step` ("attention" or "layer")."""
    if step == "attention":
        return attention_prediction(batch, seq_len, blk.heads, blk.kv_heads, blk.head_dim, dtype)
    if step == "layer":
        return layer_prediction(blk, batch, seq_len, dtype)
    raise KvcalcError(f"step must be one of {', '.join(STEPS)}, got {step!r}")


# --------------------------------------------------------------------------------
# Time, from measured terms
# --------------------------------------------------------------------------------
@record
class TimeTerms:
    """Predicted seconds of one call, split into the measured terms it is built from.

    A call runs in phases one after another, then pays a fixed per-call overhead:

        attention   = kv_s + activations_s + extra_compute_s       (CPU: one after another)
                    = max(kv_s + activations_s, extra_compute_s)  (CUDA: overlapped)
        projections = weights_s, or max(weights_s, projection_compute_s) when weights_s
                      is a plain read ceiling                     (layer step only)
        total       = attention + projections + overhead_s + allreduce_s

    kv_s is the K/V bytes at the bandwidth the implementation itself streams K/V with
    one query row per K/V head (its g = 1 arithmetic included); extra_compute_s is the
    rest of the attention FLOPs (the other g - 1 query rows of each K/V head) at the
    FLOP/s the attention reaches at this shape with K/V in cache. weights_s is the
    weight bytes at the bandwidth F.linear streams them at this batch (its arithmetic
    included).

    On a GPU a decode attention kernel multiplies each K/V tile while the next streams
    in, so the phase costs the larger of the two (`overlapped`), and the compute side is
    all attention FLOPs at the tensor-core matmul rate scaled by the share of a 16-row
    MMA tile the g query rows fill (measured on an H200, 2026-11-26: the additive form
    predicted GQA-8 and MQA 2.5x slower than they ran; reports/gpu-nvidia-h200-*).
    """

    kv_s: float  # K/V bytes read (+ one token written) / K/V streaming bandwidth
    weights_s: float  # projection weight bytes / weight streaming bandwidth (0: attention)
    activations_s: float  # q, o, x and projection outputs / read ceiling
    attention_compute_s: float  # all attention FLOPs / attention FLOP/s at its shape
    projection_compute_s: float  # projection FLOPs / projection FLOP/s at its shape
    overhead_s: float  # fixed cost of one call (dispatch, threads), measured on a tiny call
    allreduce_s: float = 0.0  # tensor parallelism: the all-reduce's modelled time
    extra_compute_s: float = 0.0  # attention FLOPs beyond what kv_s's streaming performed
    weights_streamed: bool = False  # weights_s is F.linear streaming them (compute included)
    overlapped: bool = False  # the attention's compute hides under its K/V stream (GPU)

    @property
    def attention_s(self) -> float:
        if self.overlapped:
            return max(self.kv_s + self.activations_s, self.extra_compute_s)
        return self.kv_s + self.activations_s + self.extra_compute_s

    @property
    def projection_s(self) -> float:
        if self.weights_streamed:  # F.linear's own streaming: its arithmetic is inside
            return self.weights_s
        return max(self.weights_s, self.projection_compute_s)

    @property
    def total_s(self) -> float:
        return self.attention_s + self.projection_s + self.overhead_s + self.allreduce_s

    @property
    def attention_bound(self) -> str:
        return "compute" if self.extra_compute_s > self.kv_s + self.activations_s else "memory"

    @property
    def projection_bound(self) -> str:
        if self.weights_streamed:
            return "memory"
        return "compute" if self.projection_compute_s > self.weights_s else "memory"

    @property
    def bound(self) -> str:
        """What most of the predicted time waits on: memory, compute, all-reduce or overhead."""
        parts = {"memory": self.kv_s + self.activations_s, "compute": self.extra_compute_s,
                 "all-reduce": self.allreduce_s, "overhead": self.overhead_s}
        parts["memory" if self.projection_bound == "memory" else "compute"] += self.projection_s
        return max(parts, key=lambda k: parts[k])

    def as_dict(self) -> dict[str, float]:
        return {"kv_s": self.kv_s, "weights_s": self.weights_s,
                "activations_s": self.activations_s,
                "attention_compute_s": self.attention_compute_s,
                "extra_compute_s": self.extra_compute_s,
                "projection_compute_s": self.projection_compute_s,
                "overhead_s": self.overhead_s, "allreduce_s": self.allreduce_s}


def time_terms(pred: StepPrediction, read_bytes_per_s: float, attention_flops_per_s: float,
               projection_flops_per_s: float | None = None, overhead_s: float = 0.0,
               allreduce_s: float = 0.0, kv_read_bytes_per_s: float | None = None,
               weight_read_bytes_per_s: float | None = None, group: int | None = None,
               overlap_flops_per_s: float | None = None) -> TimeTerms:
    """Split `pred`'s bytes and FLOPs into the terms of TimeTerms.

    `read_bytes_per_s`: the read-only ceiling, for activations, and for K/V and weights
    when no streaming bandwidth of the step's own pattern is given. `kv_read_bytes_per_s`
    (measured with `group` = 1 query row per K/V head) already performs 1/group of the
    attention FLOPs; the rest are added at `attention_flops_per_s`. Without it (a plain
    read ceiling, no arithmetic inside) every attention FLOP is added.
    `weight_read_bytes_per_s`: F.linear streaming weights at this batch.
    `overlap_flops_per_s` (a GPU): the attention's compute overlaps its K/V stream, all
    its FLOPs at this rate (see overlap_flops_per_s()).
    """
    if read_bytes_per_s <= 0 or attention_flops_per_s <= 0:
        raise KvcalcError("ceilings must be positive")
    b = pred.bytes_breakdown
    kv = b.get("kv_read", 0) + b.get("kv_write", 0)
    acts = sum(v for k, v in b.items() if k in ("q", "o", "activations"))
    weights = b.get("weights", 0)
    proj_flops = pred.extra.get("projection_flops", 0)
    attn_flops = pred.extra.get("attention_flops", pred.flops - proj_flops)
    if proj_flops and not (projection_flops_per_s and projection_flops_per_s > 0):
        raise KvcalcError("the layer step needs the projections' FLOP/s")
    included = attn_flops / group if (kv_read_bytes_per_s and group) else 0
    if overlap_flops_per_s:
        extra_compute_s = attn_flops / overlap_flops_per_s
    else:
        extra_compute_s = (attn_flops - included) / attention_flops_per_s
    return TimeTerms(
        kv_s=kv / (kv_read_bytes_per_s or read_bytes_per_s),
        weights_s=weights / (weight_read_bytes_per_s or read_bytes_per_s),
        activations_s=acts / read_bytes_per_s,
        attention_compute_s=attn_flops / attention_flops_per_s,
        projection_compute_s=proj_flops / projection_flops_per_s if proj_flops else 0.0,
        overhead_s=overhead_s,
        allreduce_s=allreduce_s,
        extra_compute_s=extra_compute_s,
        weights_streamed=bool(weight_read_bytes_per_s and weights),
        overlapped=bool(overlap_flops_per_s),
    )


MMA_TILE_ROWS = 16  # rows of one tensor-core MMA tile (mma.m16n8k16, Ampere and Hopper)


def overlap_flops_per_s(device_type: str, matmul_flops_per_s: float, group: int) -> float | None:
    """The attention's compute rate on a GPU: the measured matmul ceiling, times the share
    of a 16-row MMA tile that a K/V head's `group` query rows fill (decode kernels pad
    the rest). None on a CPU, where the phases add (TimeTerms)."""
    if device_type != "cuda":
        return None
    return matmul_flops_per_s * min(1.0, group / MMA_TILE_ROWS)
