"""Why a vLLM start-up failed, read from its log's words: the kinds of failure, each
one's record, and the reader (kvcalc.serving.vllm.log calls it; kvcalc.serving.vllm.check
turns it into the cause and the fix)."""

from __future__ import annotations

import re
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.failure import last_step

__all__ = ["FAILURE_KINDS", "GiB", "KV_REFUSALS", "NUM", "REFUSE_V0", "REFUSE_V1",
           "StartupFailure", "clip", "failure", "gib"]

GiB = 1 << 30
NUM = r"(-?\d[\d,]*(?:\.\d+)?)"
_NUM = NUM
# vLLM's refusals of a length the KV cache cannot hold (V0, V1)
REFUSE_V0 = re.compile(r"The models?'s max seq len \((\d+)\) is larger than the maximum number "
                       r"of tokens that can be stored in KV cache \((\d+)\)")
REFUSE_V1 = re.compile(r"(To serve at least one request with the models?'s max seq len "
                       r"\((\d+)\).*?estimated maximum model length is (\d+))")
_REFUSE_V0, _REFUSE_V1 = REFUSE_V0, REFUSE_V1


def gib(text: str) -> int:
    """A GiB figure as printed ("1,234.56") in bytes."""
    return round(float(text.replace(",", "")) * GiB)


_gib = gib
# Why a start-up failed, as StartupFailure.kind names it.
FAILURE_KINDS = (
    "max_model_len_over_context",  # --max-model-len above the config's context
    "free_memory",  # another process holds memory: free < utilization x total at start
    "oom_loading",  # out of memory loading the weights
    "oom_profile",  # ... in the profile run (one forward pass of the batch budget)
    "oom_sampler",  # ... warming up the sampler with max_num_seqs dummy requests
    "oom_cuda_graphs",  # ... capturing CUDA graphs
    "oom",  # ... at a step the log does not show
    "missing_model",  # no config or weights at the model's path or Hub id
    "kv_cache_too_small",  # one max_model_len request does not fit in the KV cache
    "no_kv_memory",  # nothing is left for the KV cache
    "unknown",  # the engine failed; the lines given do not say why
)
KV_REFUSALS = ("kv_cache_too_small", "no_kv_memory")


@record
class StartupFailure:
    """Why vLLM did not start, as the log says it: `kind` (FAILURE_KINDS), vLLM's own
    words (`words`, one line) and the figures they hold (`figures`: requested and
    derived lengths, free / total / requested GiB x 2**30 as bytes, dummy requests...)."""

    kind: str
    words: str
    figures: dict = field(default_factory=dict)


# --- why a start-up failed ----------------------------------------------------------------
_STARTED = re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM API server")
_LONG_LEN = re.compile(r"User-specified max_model_len \((\d+)\) is greater than the derived "
                       r"max_model_len \((\w+)=(\d+)(?:\.\d+)?[^)]*\)")
_FREE = re.compile(r"Free memory on device(?: [\w:]+)? \(" + _NUM + r"/" + _NUM + r"\s*GiB\) on "
                   r"startup is less than desired GPU memory utilization \((\d*\.?\d+),\s*"
                   + _NUM + r"\s*GiB\)")
_SAMPLER_OOM = re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy "
                          r"requests")
_OOM = re.compile(r"torch\.(?:cuda\.)?OutOfMemoryError[:\w ]*|CUDA out of memory(?! occurred)"
                  r"|CUDA error: out of memory|HIP out of memory|cudaErrorMemoryAllocation")
_OOM_SIZES = re.compile(r"Tried to allocate " + _NUM + r" (GiB|MiB|KiB)\. GPU \d+ has a total "
                        r"capacity of " + _NUM + r" GiB of which " + _NUM
                        + r" (GiB|MiB|KiB|bytes) is free")
# The step a start-up was at, from the lines (and traceback frames) before an error: the
# last one named wins. "done" steps name no step after them.
_STEPS = (
    ("oom_loading", re.compile(r"Starting to load model|Loading model weights(?! took)|Loading "
                               r"safetensors checkpoint shards|load_weights|\bload_model\b")),
    ("oom_profile", re.compile(r"\bprofile_run\b|determine_available_memory|"
                               r"determine_num_available_blocks|Memory profiling|\b_dummy_run\b")),
    ("oom_sampler", re.compile(r"_dummy_sampler_run|warming up sampler")),
    ("oom_cuda_graphs", re.compile(r"Capturing CUDA graph|Capturing cudagraphs|Capturing the model "
                                   r"for CUDA graphs|\bcapture_model\b|_capture_cudagraphs|"
                                   r"torch\.cuda\.graph\(|capture_end|profile_cudagraph_memory|"
                                   r"Profiling CUDA graph memory")),
    ("oom", re.compile(r"Graph capturing finished|Model loading took|Loading model weights took|"
                       r"Available KV cache memory|# (?:GPU|cuda) blocks")),
)
_MISSING = re.compile(
    r"(?P<path>\S+) does not appear to have a file named (?P<file>[\w./-]+)"
    r"|Repository Not Found for url: (?P<url>\S+)"
    r"|Invalid repository ID or local directory specified: '(?P<id>[^']*)'"
    r"|(?P<name>\S+) is not a local folder and is not a valid model identifier"
    r"|No config file found[^.]*|Cannot access gated repo[^.]*|GatedRepoError[^.]*"
    r"|RepositoryNotFoundError[^.]*")
_KV_NONE = re.compile(r"No available memory for the cache blocks")
_FAILED = re.compile(r"EngineCore failed to start|Engine core initialization failed|Engine process "
                     r"failed to start|WorkerProc failed to start")


# Where the next log record starts in flattened text: "ERROR 06-05 06:18:13 ", "[core.py:712]".
_NEXT_RECORD = re.compile(r"\s+(?:(?:ERROR|INFO|WARNING|DEBUG|CRITICAL)\s+\d\d-\d\d\s|"
                          r"\[[\w.]+\.py:\d+\])")


def clip(words: str) -> str:
    """One message: up to the next log record's prefix, at most 300 characters."""
    m = _NEXT_RECORD.search(words)
    words = (words[:m.start()] if m else words).strip()
    return words if len(words) <= 300 else words[:297] + "..."


def failure(flat: str) -> StartupFailure | None:
    """The first failure the log shows before the server came up (None: none)."""
    m = _STARTED.search(flat)
    if m:
        flat = flat[:m.start()]
    found: list[tuple[int, StartupFailure]] = []
    m = _LONG_LEN.search(flat)
    if m:
        found.append((m.start(), StartupFailure("max_model_len_over_context", clip(m.group(0)), {
            "max_model_len": int(m.group(1)), "context_key": m.group(2),
            "context": int(m.group(3))})))
    m = _FREE.search(flat)
    if m:
        found.append((m.start(), StartupFailure("free_memory", clip(m.group(0)), {
            "free_bytes": _gib(m.group(1)), "total_bytes": _gib(m.group(2)),
            "gpu_memory_utilization": m.group(3), "requested_bytes": _gib(m.group(4))})))
    sampler = _SAMPLER_OOM.search(flat)
    if sampler:
        found.append((sampler.start(), StartupFailure("oom_sampler", clip(sampler.group(0)), {
            "dummy_requests": int(sampler.group(1))})))
    m = _OOM.search(flat)
    if m and not sampler:
        kind = last_step(flat[:m.start()], _STEPS)
        tail = flat[m.start():m.start() + 400]
        sizes = _OOM_SIZES.search(tail)
        figures = {}
        if sizes:
            unit = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024 ** 2, "bytes": 1 / 1024 ** 3}
            figures = {"tried_bytes": round(float(sizes.group(1).replace(",", "")) * GiB
                                            * unit[sizes.group(2)]),
                       "total_bytes": _gib(sizes.group(3)),
                       "free_bytes": round(float(sizes.group(4).replace(",", "")) * GiB
                                           * unit[sizes.group(5)])}
        words = tail[:sizes.end()] if sizes else tail.split(". ")[0]
        found.append((m.start(), StartupFailure(kind, clip(words), figures)))
    m = _MISSING.search(flat)
    if m:
        name = m.group("path") or m.group("id") or m.group("name") or m.group("url") or ""
        figures = {"model": name.strip("'\".,")} if name else {}
        if m.group("file"):
            figures["file"] = m.group("file").rstrip(".")
        found.append((m.start(), StartupFailure("missing_model", clip(m.group(0)), figures)))
    for rx, fit_group, len_group in ((_REFUSE_V1, 3, 2), (_REFUSE_V0, 2, 1)):
        m = rx.search(flat)
        if m:
            found.append((m.start(), StartupFailure("kv_cache_too_small", clip(m.group(0)), {
                "max_model_len": int(m.group(len_group)),
                "max_model_len_fit": int(m.group(fit_group))})))
    m = _KV_NONE.search(flat)
    if m:
        found.append((m.start(), StartupFailure("no_kv_memory", m.group(0))))
    if found:
        return min(found, key=lambda f: f[0])[1]
    m = _FAILED.search(flat)
    return StartupFailure("unknown", m.group(0)) if m else None


