"""Serving engines as the latency model sees them: what differs physically between
llama.cpp, vLLM, SGLang, TensorRT-LLM, transformers and the others on the same GPU and
checkpoint (presets/engines/NAME.yaml).

An engine file gives, each fitted on that engine's published measurements
(tests/data/published, by benchmarks/fit_engines.py, which writes the files):
- the fraction of the datasheet memory bandwidth its decode kernels reach, by weight
  format family (its GEMV/GEMM kernels for 16-bit, int8, int4 ... weights);
- host costs per step and per layer (Python, scheduling, kernel launches), which run
  while the GPU works: a step takes the longer of the two;
- a GPU-side cost per layer (kernel launch tails, synchronisation) added to the data
  time, counted in GPU cycles: the same kernels cost the same cycles on any GPU, so the
  time is the count over the GPU's boost clock (Hardware.boost_clock_hz);
- the cost of one all-reduce under tensor parallelism (two per layer);
- the fraction of the dense peak its prefill reaches, by format family.
"""

from __future__ import annotations

import functools
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError, ParameterError, literal

# Weight format families an engine file names (a checkpoint's layout, or --weight-dtype).
# "awq-gemv": an AWQ checkpoint packed for AutoAWQ's GEMV kernel (quantization_config
# version "gemv"), fast at batch 1 and slow in prefill; "awq" is the GEMM packing.
FAMILIES = ("float", "fp8", "int8", "int4", "awq", "awq-gemv", "gptq", "exl2", "bnb4", "bnb8",
            "mxfp4", "nvfp4")


# The clock a per-layer cycle count is turned into time at when a preset has no
# boost_clock_hz: 1.8 GHz, between the A100's 1.41 and the RTX 4090's 2.52 GHz.
REFERENCE_CLOCK_HZ = 1_800_000_000


@record
class Engine:
    name: str
    source: str
    bandwidth_efficiency: dict[str, float]  # by format family: share of datasheet bandwidth
    prefill_mfu: dict[str, float] = field(default_factory=dict)  # share of the dense peak
    # The attention kernel: the share of bandwidth it reads and writes K/V at in decode,
    # and of the dense peak its prompt attention runs at (0: the 16-bit bandwidth share
    # and the prefill share; flash/paged kernels reach them, eager attention does not).
    kv_efficiency: float = 0.0
    attention_mfu: float = 0.0
    # Its prompt GEMMs accumulate in FP16 (llama.cpp: cuBLAS with CUBLAS_COMPUTE_16F), the
    # rate Hardware.fp16_accumulate_flops_per_s gives where it differs (GeForce: twice).
    fp16_accumulate: bool = False
    host_step_s: float = 0.0  # host time per decode step, overlapping the GPU's work
    host_layer_s: float = 0.0  # host time per layer per step, overlapping the GPU's work
    # Host time per step for each tensor-parallel rank beyond the first: the driver
    # process hands every other rank the step's inputs (vLLM's per-step broadcast).
    host_rank_s: float = 0.0
    # Host time a request pays before its first token, in series with its prefill:
    # admitting and scheduling it, sampling and returning the token (decode steps hide
    # their host work behind the previous step's GPU work; the first token cannot).
    request_s: float = 0.0
    layer_cycles: float = 0.0  # GPU cycles per layer per step beyond moving its bytes
    # Extra GPU cycles per layer per step for a quantized format's own kernels beyond
    # streaming its bytes (unpacking and scales, split reductions; bitsandbytes' separate
    # dequantize and LLM.int8's outlier split).
    format_layer_cycles: dict[str, float] = field(default_factory=dict)
    allreduce_s: float = 0.0  # one all-reduce of a decode step's activations (tp > 1)
    # Formats it runs on another family's kernels, whose fitted figures they take (vLLM:
    # AWQ and GPTQ checkpoints on its Marlin int4 kernels).
    same_kernels: dict[str, str] = field(default_factory=dict)
    versions: str = ""  # the releases its published rows ran, comma-separated
    rows: dict[str, int] = field(default_factory=dict)  # fitted rows per format family
    fitted_on: str = ""  # the ids of those rows (tests/data/published)
    held_out: str = ""  # rows of this engine kept out of the fit, to test it
    notes: str = ""

    def __post_init__(self) -> None:
        for table in ("bandwidth_efficiency", "prefill_mfu"):
            for fam, v in getattr(self, table).items():
                if fam not in FAMILIES:
                    raise KvcalcError(f"engine {self.name}: {table}.{fam}: not a format family "
                                      f"(one of {', '.join(FAMILIES)})")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                    raise KvcalcError(f"engine {self.name}: {table}.{fam} must be in (0, 1]")
        for name in ("kv_efficiency", "attention_mfu"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise KvcalcError(f"engine {self.name}: {name} must be in [0, 1] (0: default)")
        if not isinstance(self.fp16_accumulate, bool):
            raise KvcalcError(f"engine {self.name}: fp16_accumulate must be true or false")
        if not self.bandwidth_efficiency:
            raise KvcalcError(f"engine {self.name}: bandwidth_efficiency needs a format")
        for name in ("host_step_s", "host_layer_s", "host_rank_s", "request_s", "allreduce_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise KvcalcError(f"engine {self.name}: {name} must be seconds in [0, 1)")
        for name, v in [("layer_cycles", self.layer_cycles),
                        *((f"format_layer_cycles.{k}", v)
                          for k, v in self.format_layer_cycles.items())]:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e9:
                raise KvcalcError(f"engine {self.name}: {name} must be in [0, 1e9)")
        for fam in (*self.same_kernels, *self.same_kernels.values()):
            if fam not in FAMILIES:
                raise KvcalcError(f"engine {self.name}: same_kernels.{fam}: not a format "
                                  f"family (one of {', '.join(FAMILIES)})")
        for fam in self.format_layer_cycles:
            if fam not in FAMILIES:
                raise KvcalcError(f"engine {self.name}: format_layer_cycles.{fam}: not a format "
                                  f"family (one of {', '.join(FAMILIES)})")

    def layer_s(self, hardware, family: str = "float") -> float:
        """GPU time per layer per step on `hardware` for weights of `family`: the cycles
        (the format's own dequantization kernels included) at its boost clock (a GPU whose
        preset has no clock is taken at REFERENCE_CLOCK_HZ)."""
        cycles = self.layer_cycles + self.format_layer_cycles.get(self.kernels(family), 0.0)
        return cycles / (hardware.boost_clock_hz or REFERENCE_CLOCK_HZ)

    def kernels(self, family: str) -> str:
        """The family whose kernels run `family`'s weights on this engine (itself, or
        same_kernels' entry)."""
        return self.same_kernels.get(family, family)

    def efficiency(self, family: str) -> tuple[float, bool]:
        """(bandwidth share, fitted) for `family`: the figure of the family whose kernels
        run it, else the engine's 16-bit one (extrapolated: no published row ran it)."""
        family = self.kernels(family)
        if family in self.bandwidth_efficiency:
            return float(self.bandwidth_efficiency[family]), True
        return float(self.bandwidth_efficiency.get("float", min(self.bandwidth_efficiency.values()))), False

    def peak_flops(self, hardware, dtype_name: str) -> int:
        """The dense peak this engine's 16-bit GEMMs run against on `hardware`."""
        if (self.fp16_accumulate and dtype_name in ("fp16", "bf16")
                and hardware.fp16_accumulate_flops_per_s):
            return hardware.fp16_accumulate_flops_per_s
        return hardware.peak_flops(dtype_name)

    def kv_share(self, float_share: float) -> float:
        """The share of bandwidth the attention kernel moves K/V at in decode."""
        return float(self.kv_efficiency) or float_share

    def mfu(self, family: str) -> tuple[float, bool]:
        family = self.kernels(family)
        if family in self.prefill_mfu:
            return float(self.prefill_mfu[family]), True
        if self.prefill_mfu:
            return float(self.prefill_mfu.get("float", min(self.prefill_mfu.values()))), False
        return 0.5, False


# Formats an engine cannot run, with the reason (refused, not extrapolated).
UNSUPPORTED = {
    ("vllm", "exl2"): "vLLM has no EXL2 kernels (ExLlamaV2's own format)",
    ("sglang", "exl2"): "SGLang has no EXL2 kernels (ExLlamaV2's own format)",
    ("tensorrt-llm", "exl2"): "TensorRT-LLM has no EXL2 kernels (ExLlamaV2's own format)",
    ("llama.cpp", "exl2"): "llama.cpp runs GGUF quants, not EXL2",
    ("llama.cpp", "awq"): "llama.cpp runs GGUF quants; convert the AWQ checkpoint to GGUF",
    ("llama.cpp", "gptq"): "llama.cpp runs GGUF quants; convert the GPTQ checkpoint to GGUF",
    ("exllamav2", "awq"): "ExLlamaV2 runs EXL2 and GPTQ checkpoints, not AWQ",
    ("mlc-llm", "exl2"): "MLC-LLM compiles its own quantization, not EXL2",
}


def check_runs(engine: Engine, family: str) -> None:
    reason = UNSUPPORTED.get((engine.name, family))
    if reason:
        raise ParameterError("{engine} " + literal(f"{engine.name} cannot run {family} weights: "
                                                   f"{reason}"), "engine")


def weight_family(weight_dtype_name: str, quantization) -> str:
    """The format family of a workload's weights: the checkpoint layout's, else its dtype's."""
    if quantization is not None and not hasattr(quantization, "layout"):
        # Weights as a folder or Hub checkpoint stores them (kvcalc.estimate.AsStored):
        # the format is its config's quantization, None for plain weights.
        quantization = quantization.quantization
    if quantization is not None:
        layout, bits = quantization.layout, quantization.bits
        if layout.startswith("fp8"):
            return "fp8"
        if layout in ("awq", "gptq", "bnb4", "bnb8", "mxfp4", "nvfp4"):
            return layout
        return "int4" if bits <= 4 else "int8"
    name = weight_dtype_name
    if name in ("int4", "int8", "fp8"):
        return name
    return "float"


# Serving questions are timed for vLLM unless --engine names another engine or
# `roofline` (the datasheet roofline at --mfu and --bandwidth-efficiency).
DEFAULT_ENGINE = "vllm"
ROOFLINE = "roofline"


def default_engine(hardware) -> Engine | None:
    """The engine a serving question is timed on when none is named: vLLM on a GPU; none
    (the datasheet roofline) without a device or on a CPU, and none on a calibration
    file, whose own measured terms time it."""
    if hardware is None or hardware.calibration is not None or hardware.kind != "gpu":
        return None
    return load_engine(DEFAULT_ENGINE)[0]


def engine_names() -> list[str]:
    """Names of the engine files (presets/engines/*.yaml), sorted."""
    from kvcalc.presets import preset_names

    return preset_names("engines")


@functools.lru_cache(maxsize=32)  # a plan asks once per layout; the files never change
def load_engine(text: str) -> tuple[Engine, str | None]:
    """The engine `NAME[@VERSION]` names, and the version asked for (None: any). A name
    or version kvcalc has no published rows for is one error naming the known ones."""
    from kvcalc.presets import find, load_preset

    name, _, version = text.strip().partition("@")
    names = engine_names()
    stem = find(name, names)
    if stem is None:
        raise KvcalcError(f"unknown engine {text!r}; known engines: {', '.join(names)}")
    engine = load_preset(Engine, "engines", stem)
    if version:
        known = [v.strip() for v in engine.versions.split(",") if v.strip()]
        if version not in known:
            raise ParameterError("{engine} " + literal(
                f"{stem}@{version}: no published rows of that version; {stem}'s are: "
                f"{', '.join(known) or 'unversioned'}"), "engine")
    return engine, version or None
