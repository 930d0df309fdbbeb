"""The plain fit: what fits on each device after the weights, under a memory fraction and
a reserve, with no engine's policy: the largest batch at a context, the longest
context at a batch. Sizes stay in integers (bytes); the searches are exact.
"""

from __future__ import annotations

from fractions import Fraction

from kvcalc import _num
from kvcalc._record import record
from kvcalc.dtypes import MAX_SEQ_LEN, DType, dtype as _dtype
from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_cache
from kvcalc.formulas.params import param_counts, weight_params_per_device
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["Fit", "fit"]


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


def fit(spec: ModelSpec, hw: Hardware, seq_len: int, batch: int = 1,
        weight_dtype: DType | str = "bf16", kv_dtype: DType | str = "bf16", tp: int = 1,
        scale_bytes: int = 0, memory_fraction: float | str = 1, reserve_bytes: int = 0,
        encoder_seq_len: int | None = None, stored_per_device: int | None = None) -> Fit:
    """Largest batch at `seq_len` and longest context at `batch` on `tp` devices.

    Weights are sharded evenly over the tp devices (ceil); each device's KV share
    is what `kv_cache` gives per device (heads replicated when tp > kv_heads).
    `memory_fraction` (like vLLM's gpu_memory_utilization) and `reserve_bytes`
    (activations, CUDA context) come off the top. An encoder-decoder's cross-attention
    cache holds `encoder_seq_len` tokens (default: follows the decoder length). The context search is exact
    (binary search over integers on a monotone function).
    """
    try:
        frac = Fraction(str(memory_fraction))
    except ValueError:  # nan, inf
        raise KvcalcError(f"memory fraction must be in (0, 1], got {memory_fraction}") from None
    if not 0 < frac <= 1:
        raise KvcalcError(f"memory fraction must be in (0, 1], got {memory_fraction}")
    if reserve_bytes < 0:
        raise KvcalcError("reserve bytes must be >= 0")
    usable_total = int(hw.memory_bytes * frac)
    if reserve_bytes > usable_total:
        memory = (f"memory of {hw.name} ({usable_total:,} B)" if frac == 1 else
                  f"usable memory of {hw.name} ({hw.memory_bytes:,} B x memory fraction "
                  f"{memory_fraction} = {usable_total:,} B)")
        raise KvcalcError(f"reserve of {reserve_bytes:,} B exceeds the {memory}")
    wdt = weight_dtype if isinstance(weight_dtype, DType) else _dtype(weight_dtype)
    usable = usable_total - reserve_bytes
    # A served multimodal model also holds its vision tower and projector.
    towers = sum(spec.extra.get("towers", {}).values())
    if stored_per_device is None:
        resident = param_counts(spec).total + towers
        weight_bytes = wdt.nbytes(weight_params_per_device(spec, resident, tp))
    else:  # quantized weights as stored; towers stay in bf16
        weight_bytes = stored_per_device + -(-2 * towers // tp)
    free = usable - weight_bytes
    cache = kv_cache(spec, seq_len, batch, kv_dtype, tp, scale_bytes, encoder_seq_len)
    per_seq = cache.bytes_per_device // batch
    max_batch = max(0, free // per_seq) if per_seq else 0

    def bytes_at(length: int) -> int:
        return kv_cache(spec, length, batch, kv_dtype, tp, scale_bytes,
                        encoder_seq_len).bytes_per_device

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
        weight_bytes=weight_bytes,
        free_for_kv_bytes=free,
        kv_bytes_per_sequence=per_seq,
        kv_bytes_requested=cache.bytes_per_device,
        max_batch=max_batch,
        max_seq_len=max_len,
        max_seq_len_unbounded=unbounded and max_len in (MAX_SEQ_LEN, spec.max_context),
    )
