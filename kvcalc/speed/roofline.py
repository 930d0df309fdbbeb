"""Time bounds from bytes, FLOPs and a device's ceilings (what fits in its memory is
kvcalc.floor).

Roofline (Williams, Waterman, Patterson 2009): a kernel takes at least
max(bytes / bandwidth, FLOPs / peak). Decode steps sit far left of the ridge
(FLOPs per byte of about 1 for batch 1), so bandwidth binds unless the batch is
large.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import DType, dtype as _dtype
from kvcalc.formulas.step import DecodeCost
from kvcalc.spec import Hardware


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


def exchanged_dtype_for(weight_dtype: DType | str) -> str:
    """The dtype tensor parallelism's all-reduces carry: a GEMM's output, which W8A8
    writes in 16 bits (its 8-bit activations are quantized inside the GEMM's input, not
    between layers), so 16-bit whatever the weights; fp32 weights exchange fp32. vLLM
    all-reduces the row-parallel layer's output in the model dtype
    (RowParallelLinear.forward, tensor_model_parallel_all_reduce), as do SGLang and
    TensorRT-LLM's default NCCL all-reduce."""
    name = weight_dtype.name if isinstance(weight_dtype, DType) else _dtype(weight_dtype).name
    return "fp32" if name == "fp32" else "bf16"
