"""Serving engines' memory: one seam, one wing per engine.

Every engine answers the same question ("how many tokens of KV cache, how many requests
at once, and which memory terms decide it?") in its own way, read in its own released
source:

- vLLM (`kvcalc.serving.vllm`): a fraction of the device's *total* memory,
  less the weights, the profiled activation peak, non-torch memory and CUDA graphs;
- SGLang (`kvcalc.serving.sglang`): a fraction of the memory *free when the process
  started*, less what loading consumed;
- TensorRT-LLM (`kvcalc.serving.trtllm`): a fraction of what is *free after everything
  else* (the PyTorch backend's profiling run, or a built engine and its buffers).

This module holds what the wings share: the engine names and their spellings, the
default release of each (written here once), `EngineRef` (`--engine NAME[@VERSION]`),
and `count`, which hands a model, a device and an engine's flags to that engine's wing
and returns its `ServingCount` (kvcalc.serving.record). Release comparisons live in
each wing's own rules table, never here.
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError

__all__ = ["DEFAULT_RELEASE", "MEMORY_ENGINES", "EngineRef", "engine_ref", "count",
           "schedule_for"]

from kvcalc.serving.releases import DEFAULT_RELEASE, TITLES

# The engines whose memory kvcalc counts, by canonical name (each one's default release:
# kvcalc.serving.releases).
MEMORY_ENGINES = tuple(DEFAULT_RELEASE)
_SPELLINGS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "tensorrt-llm",
              "trtllm": "tensorrt-llm", "trt-llm": "tensorrt-llm", "tensorrt_llm": "tensorrt-llm"}


@record
class EngineRef:
    """One engine at one release: `--engine sglang@0.5.4`. `release` is the version text
    as the engine prints it; `named` says whether the user gave it (else the default)."""

    name: str
    release: str
    named: bool = False

    @property
    def title(self) -> str:
        return f"{TITLES[self.name]} {self.release}"

    def __str__(self) -> str:
        return f"{self.name}@{self.release}"


def engine_ref(text: str | None, default: str = "vllm") -> EngineRef:
    """`NAME[@VERSION]` read into an EngineRef: the name in any of its spellings
    (trtllm, trt-llm, tensorrt-llm), the release checked by the engine's own rules."""
    if text is None:
        return EngineRef(default, DEFAULT_RELEASE[default])
    name, _, version = text.strip().partition("@")
    canon = _SPELLINGS.get(name.strip().lower())
    if canon is None:
        raise KvcalcError(f"kvcalc counts the memory of {', '.join(MEMORY_ENGINES)}; "
                          f"got engine {name.strip()!r}")
    version = version.strip()
    if not version:
        return EngineRef(canon, DEFAULT_RELEASE[canon])
    _wing(canon).check_release(version)
    return EngineRef(canon, version, named=True)


def _wing(name: str):
    """The engine's wing (imported when first asked: each one's rules only when used)."""
    if name == "sglang":
        from kvcalc.serving import sglang as wing
    elif name == "tensorrt-llm":
        from kvcalc.serving import trtllm as wing
    else:
        from kvcalc.serving import vllm as wing
    return wing


def count(spec, hw, flags):
    """The engine's start-up count for `spec` on devices like `hw` with `flags` (that
    engine's flags record: kvcalc.serving.sglang.SglangFlags, ...): a ServingCount."""
    return _wing(flags.engine.name).count(spec, hw, flags)


def schedule_for(ref, flags: dict | None = None):
    """How `ref`'s scheduler runs many requests at once at its release
    (kvcalc.serving.record.Schedule, the served-load model's rules), from its wing;
    `flags`: the engine's own flags by parameter name, as its count resolved them
    (Counted.flags) and as given, where they change it."""
    f = flags or {}
    if ref.name == "sglang":
        from kvcalc.serving.sglang.rules import rules_for

        return rules_for(ref.release).schedule(
            gpu_mib=int(f.get("gpu_memory_mib") or 0), tp=int(f.get("tp_size") or 1),
            cuda_graph_max_bs=f.get("cuda_graph_max_bs"),
            disable_cuda_graph=bool(f.get("disable_cuda_graph")),
            chunked_prefill_size=int(f.get("chunked_prefill_size") or 8192))
    if ref.name == "tensorrt-llm":
        from kvcalc.serving.trtllm.schedule import schedule

        return schedule(ref.release, enable_chunked_prefill=bool(f.get("enable_chunked_prefill")),
                        backend=f.get("backend"),
                        max_batch_size=int(f.get("max_batch_size") or 2048),
                        cuda_graphs=f.get("cuda_graphs", True) is not False,
                        cuda_graph_config=f.get("cuda_graph_config"))
    from kvcalc.serving.vllm.schedule import schedule

    return schedule(ref.release, max_num_seqs=int(f.get("max_num_seqs") or 256),
                    enforce_eager=bool(f.get("enforce_eager")))
