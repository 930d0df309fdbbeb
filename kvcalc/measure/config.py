"""What to measure (MeasureConfig) and what came back (MeasureResult). No torch here.

Fields left as None are filled per device by the runner (see DEFAULTS): on a GPU
the default cache is at least 1 GB (far above L2); on a CPU the run stays quick.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any, Callable

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError
from kvcalc.ground.dtypes import MAX_BATCH, MAX_SEQ_LEN, MAX_WIDTH, check_size

DEVICES = ("auto", "cuda", "cpu")
STEP_CHOICES = ("attention", "layer", "both")
L2_CHOICES = ("auto", "rotate", "flush", "none")
MEASURE_DTYPES = ("fp32", "bf16", "fp16")

# Implementations. "auto" picks the fastest correct one for the device.
IMPLS = ("grouped", "sdpa", "repeat", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math")
IMPL_CHOICES = ("auto", "all") + IMPLS
# auto times these (sdpa-flash only where flash accepts the inputs) and keeps the fastest.
AUTO_CANDIDATES = {"cpu": ("grouped", "sdpa"), "cuda": ("sdpa-flash", "grouped", "sdpa")}
ALL_IMPLS = {"cpu": ("grouped", "sdpa", "repeat"),
             "cuda": ("sdpa-flash", "grouped", "sdpa", "repeat")}


@record
class DeviceDefaults:
    """Per-device defaults, each with the reason for its value."""

    dtype: str
    seq_len: int
    target_cache_bytes: int  # the default batch is the smallest power of two reaching this
    max_default_batch: int
    warmup: int
    iters: int
    # Rounds of (streamed ceilings, then a share of the timed repetitions) per row: a
    # host whose memory bandwidth drifts over seconds (a shared VM) moves the ceilings
    # and the step together, so the prediction keeps up with the timing.
    rounds: int = 1


DEFAULTS = {
    # >= 1 GB of K/V per call: ~20x an H100's 50 MB L2, where fused decode kernels
    # reach ~85-90% of bandwidth (FlashInfer's plots); bf16 as served.
    "cuda": DeviceDefaults("bf16", 8192, 10**9, 1024, warmup=10, iters=100),
    # 64 MiB: twice a typical server LLC share, and about 2 ms a call on 2 cores;
    # fp32 because CPU bf16 matmuls are often emulated.
    "cpu": DeviceDefaults("fp32", 2048, 64 * 2**20, 16, warmup=3, iters=21, rounds=3),
}


@record
class MeasureConfig:
    """One `kvcalc measure` run. Sizes are counts; None means the device default."""

    heads: int
    kv_heads: int
    head_dim: int = 128
    seq_len: int | None = None
    batch: int | None = None
    dtype: str | None = None  # fp32 | bf16 | fp16
    device: str = "auto"  # auto | cuda | cpu
    impl: str = "auto"  # auto | all | one name | comma-separated names
    step: str = "attention"  # attention | layer | both
    warmup: int | None = None
    iters: int | None = None
    compare: bool = False  # MHA, the given kv_heads and MQA, same query heads
    cuda_graphs: bool = False
    l2: str = "auto"  # auto: rotate caches, or flush when rotation would need too many
    d_model: int | None = None  # layer step width; default heads x head_dim
    layers: int = 1  # the model's depth (from a preset), reported with the layer step
    model: str = ""  # preset name, reported
    ceilings_cache: str | Path | None = None  # a JSON file to reuse ceilings from
    memory_fraction: float = 0.85  # of free memory the run may use
    seed: int = 0
    tp: tuple[int, ...] | None = None  # tensor-parallel degrees: ranks of torch.distributed

    def __post_init__(self) -> None:
        for name, upper in (("heads", MAX_WIDTH), ("kv_heads", MAX_WIDTH),
                            ("head_dim", MAX_WIDTH)):
            check_size(name, getattr(self, name), upper)
        for name, upper in (("seq_len", MAX_SEQ_LEN), ("batch", MAX_BATCH),
                            ("d_model", MAX_WIDTH), ("iters", 10**6)):
            if getattr(self, name) is not None:
                check_size(name, getattr(self, name), upper)
        if self.warmup is not None and (not isinstance(self.warmup, int) or self.warmup < 0):
            raise KvcalcError(f"warmup must be >= 0, got {self.warmup!r}")
        if self.warmup is not None and self.warmup > 10**6:
            raise KvcalcError(f"warmup={self.warmup} is absurdly large (limit 1000000)")
        check_size("layers", self.layers, 10_000)
        if self.kv_heads > self.heads:
            raise KvcalcError(f"kv_heads ({self.kv_heads}) cannot exceed heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise KvcalcError(
                f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        if self.device not in DEVICES:
            raise KvcalcError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.step not in STEP_CHOICES:
            raise KvcalcError(f"step must be one of {', '.join(STEP_CHOICES)}, got {self.step!r}")
        if self.l2 not in L2_CHOICES:
            raise KvcalcError(f"l2 must be one of {', '.join(L2_CHOICES)}, got {self.l2!r}")
        if self.dtype is not None and self.dtype not in MEASURE_DTYPES:
            raise KvcalcError(
                f"dtype must be one of {', '.join(MEASURE_DTYPES)} for measuring, got {self.dtype!r}")
        self.impl_names()  # validates
        if self.tp is not None:
            if isinstance(self.tp, int):
                object.__setattr__(self, "tp", (self.tp,))
            if not self.tp:
                raise KvcalcError("tp needs at least one degree")
            for n in self.tp:
                check_size("tp", n, 1024)
        if not 0 < self.memory_fraction <= 1:
            raise KvcalcError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")

    def impl_names(self) -> list[str]:
        """The requested names, in order ('auto' and 'all' kept for the runner)."""
        names = [n.strip() for n in str(self.impl).split(",") if n.strip()]
        if not names:
            raise KvcalcError("impl must name at least one implementation")
        for n in names:
            if n not in IMPL_CHOICES:
                raise KvcalcError(f"unknown impl {n!r}; choose from {', '.join(IMPL_CHOICES)}")
        return list(dict.fromkeys(names))

    def steps(self) -> list[str]:
        return ["attention", "layer"] if self.step == "both" else [self.step]

    def kv_variants(self) -> list[int]:
        """kv_heads to run: with compare MHA, the given one and MQA (duplicates dropped)."""
        if not self.compare:
            return [self.kv_heads]
        return list(dict.fromkeys([self.heads, self.kv_heads, 1]))


@record(frozen=False)
class MeasureResult:
    """Rows (one per step x kv_heads x impl), the device, and the ceilings measured."""

    rows: list[dict[str, Any]]
    device: dict[str, Any]
    ceilings: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: {'device', 'ceilings', 'config', 'rows'}."""
        return {"device": self.device, "ceilings": self.ceilings, "config": self.config,
                "rows": self.rows}

    def as_dict(self) -> dict[str, Any]:
        """`kvcalc measure --format json`: to_dict(), a copy the caller may change."""
        import copy

        return copy.deepcopy(self.to_dict())


# progress(description, done, total): the runner reports steps; the CLI draws a bar.
Progress = Callable[[str, int, int], None]

