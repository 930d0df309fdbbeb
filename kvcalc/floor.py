"""The plain fit: what fits on each device after the weights, under a memory fraction and
a reserve, with no engine's policy: the largest batch at a context, the longest
context at a batch. Sizes stay in integers (bytes); the searches are exact.
"""

from __future__ import annotations

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import MAX_SEQ_LEN
from kvcalc.formulas.cache import kv_cache
from kvcalc.formulas.params import param_counts, weight_params_per_device
from kvcalc.formulas.step import StoredWeights
from kvcalc.spec import ModelSpec
from kvcalc.workload import Memory, Workload

__all__ = ["Fit", "fit", "fits", "free_for_kv_bytes", "weight_bytes_per_device"]


@record
class Fit:
    """What fits on each device after the weights: all sizes in bytes per device."""

    usable_bytes: int  # memory x fraction - reserve
    weight_bytes: int  # this device's share of the weights
    free_for_kv_bytes: int  # may be negative: the weights alone do not fit
    kv_bytes_per_sequence: int  # at the requested seq_len
    kv_bytes_requested: int  # the requested batch at seq_len
    max_batch: int  # at the requested seq_len; 0 if not even one sequence fits
    max_seq_len: int  # at the requested batch; 0 if not even one token fits; the model's
    # max context when memory does not bound it
    max_seq_len_unbounded: bool  # every layer's cache stops growing: memory does not bound it

    @property
    def fits(self) -> bool:
        return 0 <= self.kv_bytes_requested <= self.free_for_kv_bytes


def weight_bytes_per_device(spec: ModelSpec, workload: Workload, *,
                            stored: StoredWeights | None = None) -> int:
    """The weights one of the workload's tp devices holds, in bytes: the language model
    (sharded evenly, ceil; K/V projections replicated like the cache when tp > kv_heads)
    in the workload's weight dtype, or as `stored` (a quantized checkpoint) says."""
    tp = workload.tp
    # A served multimodal model also holds its vision tower and projector.
    towers = sum(spec.extra.get("towers", {}).values())
    if stored is None:
        resident = param_counts(spec).total + towers
        return workload.weight_dtype.nbytes(weight_params_per_device(spec, resident, tp))
    if stored.towers is not None:  # counted from the checkpoint's headers
        return stored.per_device + -(-stored.towers // tp)
    return stored.per_device + -(-2 * towers // tp)  # towers stay in bf16


def free_for_kv_bytes(spec: ModelSpec, workload: Workload, *, memory: Memory,
                      stored: StoredWeights | None = None) -> int:
    """Bytes one device has left for the KV cache after its weights (negative: the
    weights alone do not fit)."""
    return memory.usable_bytes - weight_bytes_per_device(spec, workload, stored=stored)


def fits(spec: ModelSpec, workload: Workload, *, memory: Memory,
         stored: StoredWeights | None = None) -> bool:
    """`fit(...).fits` without the searches: the workload's batch at its seq_len fits."""
    free = free_for_kv_bytes(spec, workload, memory=memory, stored=stored)
    return 0 <= _kv_bytes(spec, workload, workload.seq_len) <= free


def _kv_bytes(spec: ModelSpec, w: Workload, seq_len: int) -> int:
    """One device's cache for the workload's batch at `seq_len` tokens."""
    return kv_cache(spec, seq_len, w.batch, w.kv_dtype, w.tp, w.kv_scale_bytes,
                    w.encoder_seq_len).bytes_per_device


def fit(spec: ModelSpec, workload: Workload, *, memory: Memory,
        stored: StoredWeights | None = None) -> Fit:
    """Largest batch at the workload's seq_len and longest context at its batch, on each
    of its tp devices.

    Weights are sharded evenly over the tp devices (ceil); each device's KV share
    is what `kv_cache` gives per device (heads replicated when tp > kv_heads).
    `memory` says the device and its share (a fraction like vLLM's
    gpu_memory_utilization, and a reserve for activations and the CUDA context, both
    off the top). An encoder-decoder's cross-attention cache holds `encoder_seq_len`
    tokens (default: follows the decoder length). The context search is exact
    (binary search over integers on a monotone function).
    """
    w = workload
    usable = memory.usable_bytes
    weights = weight_bytes_per_device(spec, w, stored=stored)
    free = usable - weights
    requested = _kv_bytes(spec, w, w.seq_len)
    per_seq = requested // w.batch
    max_batch = max(0, free // per_seq) if per_seq else 0

    def bytes_at(length: int) -> int:
        return _kv_bytes(spec, w, length)

    # A cache that stops growing (every layer windowed, chunked or a constant state) leaves
    # the context bounded by the model, not by memory.
    unbounded = all(mx.bounded for layer, _ in spec.groups() for mx in layer.mixers)
    if free < bytes_at(1):
        max_len = 0
    elif bytes_at(MAX_SEQ_LEN) <= free:
        # Memory does not bound the context: the model's trained context does, when known.
        max_len = spec.max_context if unbounded and spec.max_context else MAX_SEQ_LEN
    else:
        max_len = _num.largest(lambda n: bytes_at(n) <= free, 1, MAX_SEQ_LEN)
        unbounded = False
    return Fit(
        usable_bytes=usable,
        weight_bytes=weights,
        free_for_kv_bytes=free,
        kv_bytes_per_sequence=per_seq,
        kv_bytes_requested=requested,
        max_batch=max_batch,
        max_seq_len=max_len,
        max_seq_len_unbounded=unbounded and max_len in (MAX_SEQ_LEN, spec.max_context),
    )
