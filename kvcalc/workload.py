"""What a model is run with, as two records passed by keyword: the `Workload` (lengths,
batch, number formats, tensor parallelism) and the device `Memory` a run may fill.

The estimate, the plain fit, the latency and the sweep's rows all take these, instead
of the same eight loose values threaded from signature to signature. Checks that need
the model (an encoder length for a decoder-only model, the config's quantization) are
made where the model is known (kvcalc.estimate.workload_for); the formulas check the
lengths themselves, so a sweep's arrays pass through a Workload unchecked.
"""

from __future__ import annotations

from functools import cached_property

from kvcalc.ground import num as _num
from kvcalc.ground.record import record
from kvcalc.ground.dtypes import DTYPES, DType, dtype, weight_dtype
from kvcalc.errors import KvcalcError
from kvcalc.spec import Hardware

__all__ = ["Memory", "Workload"]


@record
class Workload:
    """One configuration to run: `batch` sequences at `seq_len` tokens on `tp` devices.

    seq_len and batch are ints (an estimate) or equal-shape numpy arrays (a sweep's
    rows). Dtype names are looked up when the record is made (weights also take the
    checkpoint formats awq and gptq: int4 values).
    """

    seq_len: int  # tokens of context at the decode step
    batch: int = 1  # sequences decoded together
    kv_dtype: DType = DTYPES["bf16"]  # the KV cache's elements
    # The weights' values: bf16 also when they are as the config stores them, whose
    # layout (scales, zero points) `quantization` then gives.
    weight_dtype: DType = DTYPES["bf16"]
    tp: int = 1  # tensor-parallel devices
    kv_scale_bytes: int = 0  # quantization scale per token per K/V head (0: none)
    encoder_seq_len: int | None = None  # encoder-decoder: encoder tokens (None: seq_len)
    prompt_len: int | None = None  # tokens per prompt the prefill runs (None: seq_len)
    # kvcalc.quant's Quantization the weights are stored in; None: plain weight_dtype.
    quantization: object = None

    def __post_init__(self) -> None:
        # Straight into the instance dict, as the record's own __init__ writes fields.
        if not isinstance(self.kv_dtype, DType):
            self.__dict__["kv_dtype"] = dtype(self.kv_dtype)
        if not isinstance(self.weight_dtype, DType):
            self.__dict__["weight_dtype"] = weight_dtype(self.weight_dtype)

    @property
    def weight_label(self) -> str:
        """The weights' dtype as every output names it: a checkpoint's own format when they
        are as its config stores them ('fp8 (block 128x128)', 'mxfp4 experts', 'int4
        g128'), else the dtype asked for ('bf16' for an unquantized model)."""
        own = getattr(self.quantization, "weights_label", None)  # AsStored's
        if own:
            return own
        q = getattr(self.quantization, "quantization", self.quantization)
        if q is not None and q.from_config:
            return q.dtype_label
        return self.weight_dtype.name

    @property
    def prompt_tokens(self) -> int:
        """Tokens of each prompt the prefill runs: prompt_len, else seq_len."""
        return self.seq_len if self.prompt_len is None else self.prompt_len


@record
class Memory:
    """A device and the share of its memory a run may fill: memory x `fraction` less
    `reserve_bytes` (the plain fit's budget; the serving engine's own is
    kvcalc.serving.vllm.settings.EngineSettings)."""

    hardware: Hardware
    fraction: float | str = 1  # in (0, 1], read as the decimal it is written as
    reserve_bytes: int = 0  # set aside first: activations, CUDA context

    @cached_property
    def usable_bytes(self) -> int:
        """memory x fraction - reserve, in bytes (exact); checked on first use, once."""
        hw = self.hardware
        try:
            num, den = _num.exact_ratio(self.fraction)
        except (ValueError, ZeroDivisionError):  # nan, inf
            raise KvcalcError(f"memory fraction must be in (0, 1], got {self.fraction}") from None
        if not 0 < num <= den:
            raise KvcalcError(f"memory fraction must be in (0, 1], got {self.fraction}")
        if self.reserve_bytes < 0:
            raise KvcalcError("reserve bytes must be >= 0")
        usable_total = hw.memory_bytes * num // den
        if self.reserve_bytes > usable_total:
            memory = (f"memory of {hw.name} ({usable_total:,} B)" if num == den else
                      f"usable memory of {hw.name} ({hw.memory_bytes:,} B x memory fraction "
                      f"{self.fraction} = {usable_total:,} B)")
            raise KvcalcError(f"reserve of {self.reserve_bytes:,} B exceeds the {memory}")
        return usable_total - self.reserve_bytes
