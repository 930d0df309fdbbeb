"""Time bounds from bytes, FLOPs and a device's ceilings; what fits in its memory.

Roofline (Williams, Waterman, Patterson 2009): a kernel takes at least
max(bytes / bandwidth, FLOPs / peak). Decode steps sit far left of the ridge
(FLOPs per byte of about 1 for batch 1), so bandwidth binds unless the batch is
large. Capacity math stays in integers; only times are floats.
"""

from __future__ import annotations

from fractions import Fraction

from kvcalc._record import record
from kvcalc.errors import KvcalcError
from kvcalc.formulas import DecodeCost, kv_cache, param_counts, weight_params_per_device
from kvcalc.dtypes import MAX_SEQ_LEN, DType, dtype as _dtype
from kvcalc.spec import Hardware, ModelSpec


@record
class Roofline:
    """Lower bounds for one step on one device."""

    memory_s: float
    compute_s: float
    bandwidth_bytes_per_s: int
    peak_flops_per_s: int
    batch: int

    @property
    def time_s(self) -> float:
        return max(self.memory_s, self.compute_s)

    @property
    def bound(self) -> str:
        """Which resource binds: 'memory' or 'compute'."""
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which compute binds."""
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    @property
    def tokens_per_s(self) -> float:
        """New tokens per second across the batch (one per sequence per step)."""
        return self.batch / self.time_s

    @property
    def time_per_token_s(self) -> float:
        """Latency one sequence sees per generated token (= one step)."""
        return self.time_s


def roofline(bytes_moved: int, flops: int, bandwidth_bytes_per_s: int,
             peak_flops_per_s: int, batch: int = 1) -> Roofline:
    """Time bound from raw figures (datasheet or measured ceilings)."""
    if bandwidth_bytes_per_s <= 0 or peak_flops_per_s <= 0:
        raise KvcalcError("bandwidth and peak FLOP/s must be positive")
    return Roofline(
        memory_s=bytes_moved / bandwidth_bytes_per_s,
        compute_s=flops / peak_flops_per_s,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s,
        peak_flops_per_s=peak_flops_per_s,
        batch=batch,
    )


def decode_roofline(cost: DecodeCost, hw: Hardware, compute_dtype: DType | str = "bf16") -> Roofline:
    """One decode step on one of `cost.tp` devices, at the datasheet's dense peaks.

    With TP the devices run in parallel, so the step takes one device's share;
    all-reduce traffic between devices is not modelled.
    """
    name = compute_dtype.name if isinstance(compute_dtype, DType) else _dtype(compute_dtype).name
    return roofline(cost.per_device_bytes, cost.per_device_flops,
                    hw.memory_bandwidth_bytes_per_s, hw.peak_flops(name), cost.batch)


def compute_dtype_for(weight_dtype: DType | str) -> str:
    """The arithmetic (and activation) dtype a weight dtype runs with.

    fp8 and int8 weights run W8A8 on their own tensor cores (FP8 and SmoothQuant
    serving), so activations are 8-bit too; int4 weights are dequantised to bf16
    (W4A16, as in AWQ/GPTQ kernels). The roofline's peak and the activation bytes
    both follow this one choice."""
    name = weight_dtype.name if isinstance(weight_dtype, DType) else _dtype(weight_dtype).name
    return "bf16" if name == "int4" else name


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
    unbounded = not spec.encoder_layers and all(
        layer.mixer.cache_kind in ("sliding", "chunked", "state", "none")
        for layer, _ in spec.groups())
    if free < bytes_at(1):
        max_len = 0
    elif bytes_at(MAX_SEQ_LEN) <= free:
        # Memory does not bound the context: the model's trained context does, when known.
        max_len = spec.max_context if unbounded and spec.max_context else MAX_SEQ_LEN
    else:
        lo, hi = 1, MAX_SEQ_LEN  # bytes_at(lo) <= free < bytes_at(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if bytes_at(mid) <= free:
                lo = mid
            else:
                hi = mid
        max_len = lo
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
