"""A vLLM start-up log, read: the release, the model, the flags and every memory term it
printed, from any release 0.6 to 0.33. Pure text in, a record out (kvcalc.serving.vllm.check
sets kvcalc's own count beside it).

The lines read, by release (quoted from the Python source of the wheels; GiB is 2**30
bytes, and "GB" in the oldest lines is GiB too: they divide by float(2**30)):

* weights: "Loading model weights took 14.9888 GB" (V0 `worker/model_runner.py`,
  0.6-0.10); "Model loading took 14.2474 GiB and 558.9 seconds" (V1
  `v1/worker/gpu_model_runner.py::load_model`, 0.8-0.12), "... GiB memory and ..."
  (0.13-0.33).
* the profile (V0 `worker/worker.py::determine_num_available_blocks`): 0.6.4 one line
  "Memory profiling results: total_gpu_memory=..GiB ... peak_torch_memory=..GiB ...
  non_torch_memory=..GiB kv_cache_size=..GiB gpu_memory_utilization=0.90"; 0.6.5 one
  term per line ("model weights take", "non_torch_memory", "PyTorch activation peak
  memory", "available_kv_cache_memory"); 0.7-0.10 "model weights take ..GiB;
  non_torch_memory takes ..GiB; PyTorch activation peak memory takes ..GiB; the rest of
  the memory reserved for KV Cache is ..GiB." after "total_gpu_memory (..GiB) x
  gpu_memory_utilization (0.90)".
* V1 (`v1/worker/gpu_worker.py::determine_available_memory`, 0.8-0.33): "Available KV
  cache memory: 8.11 GiB"; from 0.18 "Estimated CUDA graph memory: 0.36 GiB total"
  (`gpu_model_runner.py::profile_cudagraph_memory`, 0.33 line 6410).
* capacity: "# GPU blocks: N" / "# cuda blocks: N" (V0 `executor/executor_base.py`, V1
  0.7), "GPU KV cache size: 178,880 tokens" and "Maximum concurrency for 40,960 tokens
  per request: 4.37x" (`v1/core/kv_cache_utils.py`, 0.8-0.33; V0 0.6.4+ the latter).
* refusals: V0 "The model's max seq len (N) is larger than the maximum number of tokens
  that can be stored in KV cache (M)"; V1 "... the estimated maximum model length is N";
  "No available memory for the cache blocks".
* the release: "Initializing a V1 LLM engine (v0.9.2) with config", "Initializing an
  LLM engine (v0.6.4.post1)", the 0.11+ banner "version 0.18.0", "vLLM API server
  version 0.9.2"; the flags: "non-default args: {...}" (0.9+), the engine config
  ("max_seq_len=..., tensor_parallel_size=..., dtype=torch.bfloat16,
  quantization=compressed-tensors, kv_cache_dtype=auto").
* CUDA graphs: whether the estimate was subtracted, in the log's own words (`gpu_worker.py`
  0.18-0.19 "In v0.19, CUDA graph memory profiling will be enabled by default ... To try
  it now": logged, not subtracted; "CUDA graph memory profiling is enabled": subtracted);
  what the capture took ("Graph capturing finished in 5 secs, took 0.52 GiB": captured
  after the KV cache is sized, in the memory above the budget, before 0.20).
* why a start-up failed (`StartupFailure`, from the first error the log shows):
  `config.py` "User-specified max_model_len (N) is greater than the derived
  max_model_len (max_position_embeddings=M ...)"; `gpu_worker.py::init_device` "Free
  memory on device (F/T GiB) on startup is less than desired GPU memory utilization (U,
  R GiB)"; `gpu_model_runner.py::_dummy_sampler_run` "CUDA out of memory occurred when
  warming up sampler with N dummy requests"; torch's "CUDA out of memory" / "CUDA error:
  out of memory", placed by the last step the log shows before it (loading the weights,
  the profile run, the sampler warm-up, CUDA-graph capture); Hugging Face's "does not
  appear to have a file named", "Repository Not Found", vLLM's "Invalid repository ID or
  local directory specified"; the KV-cache refusals below.

Ranks: lines carry prefixes such as "(Worker_TP1 pid=..)", "(VllmWorker rank=1 pid=..)",
"(VllmWorkerProcess pid=..)" (a V0 worker), "[rank0]:" or a container name "name-1  | ";
several ranks' lines may be interleaved, even within a line. Each figure is taken from
the first rank-0 (or unprefixed, or engine-core) line, else the first line that has it,
and a note says when ranks printed different values.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.vllm.fail import (FAILURE_KINDS, KV_REFUSALS, NUM as _NUM,
                                       REFUSE_V0 as _REFUSE_V0, REFUSE_V1 as _REFUSE_V1,
                                       GiB, StartupFailure, clip as _clip,
                                       failure as _failure, gib as _gib)
from kvcalc.errors import KvcalcError

__all__ = ["FAILURE_KINDS", "KV_REFUSALS", "TERMS", "StartupFailure", "VllmLog",
           "parse_vllm_log"]

# The memory terms a log may print, in the order vLLM subtracts them (bytes).
TERMS = ("total", "budget", "weights", "activation_peak", "non_torch", "cuda_graphs",
         "kv_cache")
MAX_LOG_CHARS = 20_000_000
@record
class VllmLog:
    """What one start-up log printed. Bytes are GiB figures x 2**30 (vLLM prints two
    decimals, so each is known to +-0.005 GiB, four for the oldest weights line)."""

    vllm_version: str | None
    engine: str | None  # "v0" / "v1", from the engine line or the lines' format
    model: str | None
    gpu_name: str | None
    flags: dict  # vLLM's names: max_model_len, gpu_memory_utilization, tensor_parallel_size...
    terms: dict  # TERMS name -> bytes, those printed
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    concurrency_len: int | None  # the "for N tokens per request" of that line
    refused: bool
    refusal: str  # vLLM's words, "" when it started
    max_model_len_fit: int | None  # the largest length the refusal names
    ranks: tuple[str, ...]  # rank prefixes seen ("" = unprefixed)
    notes: tuple[str, ...] = field(default_factory=tuple)
    failure: StartupFailure | None = None  # why it did not start (None: it started, or
    # the log stops before anything failed)
    graphs_captured: int | None = None  # "Graph capturing finished in N secs, took X GiB"
    # Whether the release subtracted its CUDA-graph estimate, in the log's words (None:
    # the log does not say; the release's rule holds)
    graph_estimate_subtracted: bool | None = None
    # "Encoder cache will be initialized with a budget of N tokens, and profiled with K
    # image items" (V1, a vision model): N and K
    encoder_budget: int | None = None
    encoder_items: int | None = None

    @property
    def sized_kv_cache(self) -> bool:
        """The log reaches the point where vLLM sized its KV cache."""
        kv_refusal = self.refused and (self.failure is None or self.failure.kind in KV_REFUSALS)
        return (kv_refusal or self.num_gpu_blocks is not None or "kv_cache" in self.terms
                or self.kv_cache_tokens is not None)


# --- line prefixes ---------------------------------------------------------------------
_RANK = re.compile(r"\((?P<who>(?:[A-Za-z][\w ]*?(?:\s+rank=\d+)?\s+)?)pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*"
                   r"|\[rank(?P<n>\d+)\]:\s*")
_CONTAINER = re.compile(r"^[\w.-]+\s+\|\s")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A physical line that starts a log record (or a prefix, a progress bar, a shell line).
_RECORD = re.compile(r"^(?:\(|\[|[A-Z]{4,7}\b|\d{4}-\d\d-\d\d|[\w.-]+\s+\|\s|\$|>|#|vllm\b|python|"
                     r"Capturing|Loading|Traceback|\s*File |\w+Error:)")


def _unwrapped(text: str) -> list[str]:
    """The log's lines, a terminal's or a file's hard wrap (a long line followed by one
    that starts mid-record) joined back."""
    out: list[str] = []
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.rstrip()
        if out and len(out[-1]) >= 100 and line and not _RECORD.match(line.lstrip()):
            out[-1] += line if not line.startswith(" ") else line
        else:
            out.append(line)
    return out


def _pieces(text: str):
    """(rank, text) for each stretch of the log that one rank wrote."""
    for raw in _unwrapped(text):
        line = _CONTAINER.sub("", raw.strip(), count=1)
        rank, start = "", 0
        for m in _RANK.finditer(line):
            if m.start() > start and line[start:m.start()].strip():
                yield rank, line[start:m.start()]
            rank = _rank_name(m)  # nested prefixes: the innermost (the worker) names it
            start = m.end()
        if line[start:].strip():
            yield rank, line[start:]


def _rank_name(m: re.Match) -> str:
    if m.group("n") is not None:
        return f"rank{m.group('n')}"
    who = " ".join(m.group("who").split())
    return who or m.group(0).strip().strip("()")


def _main_rank(rank: str) -> bool:
    """Rank 0 or the driver: no prefix, the engine core or API server, TP0/rank=0."""
    if not rank:
        return True
    low = rank.lower()
    if low.startswith(("enginecore", "apiserver", "rank0")):
        return True
    return bool(re.search(r"(?:tp|rank=)0\b", low)) or low.endswith("_tp0")


# --- figures ---------------------------------------------------------------------------
def _int(text: str) -> int:
    return int(text.replace(",", "").split(".")[0])


_PATTERNS: tuple[tuple[str, re.Pattern, object], ...] = (
    ("weights", re.compile(r"Loading model weights took " + _NUM + r"\s*GB"), _gib),
    ("weights", re.compile(r"Model loading took " + _NUM + r"\s*Gi?B"), _gib),
    ("weights", re.compile(r"model weights take\s+" + _NUM + r"\s*GiB"), _gib),
    ("total", re.compile(r"total_gpu_memory[=\s(]+" + _NUM + r"\s*GiB"), _gib),
    ("budget", re.compile(r"vLLM instance can use[^=]*=\s*" + _NUM + r"\s*GiB"), _gib),
    ("budget", re.compile(r"the current vLLM instance can use\s+" + _NUM + r"\s*GiB"), _gib),
    ("non_torch", re.compile(r"non_torch_memory(?:=|\s+takes\s+|\s+)" + _NUM + r"\s*GiB"), _gib),
    ("activation_peak", re.compile(r"PyTorch activation peak memory(?:\s+takes)?\s+" + _NUM
                                   + r"\s*GiB"), _gib),
    ("peak_torch", re.compile(r"peak_torch_memory=" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"kv_cache_size=" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"available_kv_cache_memory\s+" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"reserved for KV Cache is\s+(?:only\s+)?" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"Available KV cache memory:\s*" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"than the available KV cache memory \(" + _NUM + r"\s*GiB\)"), _gib),
    ("cuda_graphs", re.compile(r"Estimated CUDA graph memory:\s*" + _NUM + r"\s*GiB"), _gib),
    ("cuda_graphs", re.compile(r"GiB \(actual\),\s*" + _NUM + r"\s*GiB \(estimated\)"), _gib),
    ("cuda_graphs_captured", re.compile(r"Graph capturing finished in [\d.]+ secs?, took\s*"
                                        + _NUM + r"\s*GiB"), _gib),
    ("num_gpu_blocks", re.compile(r"(?<![\w#])#?\s*(?:GPU|cuda|CUDA) blocks:\s*" + _NUM), _int),
    ("kv_cache_tokens", re.compile(r"GPU KV cache size:\s*" + _NUM + r"\s*tokens"), _int),
    # V1's multimodal profile (kvcalc.serving.vllm.encoder)
    ("encoder_budget", re.compile(r"Encoder cache will be initialized with a\s+budget of\s*"
                                  + _NUM + r"\s*tokens"), _int),
    ("encoder_items", re.compile(r"and profiled with\s*" + _NUM + r"\s*image items"), _int),
    ("utilization", re.compile(r"gpu_memory_utilization(?:=|\s+\(|\s+)(\d?\.\d+)"), str),
    ("utilization", re.compile(r"The current --gpu-memory-utilization=(\d?\.\d+)"), str),
    # 0.18-0.19: "... increase --gpu-memory-utilization from 0.7000 to 0.7051 to maintain ..."
    ("utilization", re.compile(r"--gpu-memory-utilization from (\d?\.\d+) to"), str),
    # 0.10+ (debug before 0.2x): memory_profiling's summary.
    ("activation_peak", re.compile(r"torch peak memory increase:\s*" + _NUM + r"\s*GiB"), _gib),
    ("non_torch", re.compile(r"non-torch forward increase memory:\s*" + _NUM + r"\s*GiB"), _gib),
    ("weights", re.compile(r"weights memory:\s*" + _NUM + r"\s*GiB"), _gib),
    # 0.11-0.26 (debug level): "Actual usage is X GiB for weight, Y GiB for peak
    # activation, Z GiB for non-torch memory, and W GiB for CUDAGraph memory" (W: the
    # graphs as captured).
    ("weights", re.compile(r"Actual usage is\s*" + _NUM + r"\s*GiB for weight"), _gib),
    ("activation_peak", re.compile(r"GiB for weight,\s*" + _NUM + r"\s*GiB for peak activation"),
     _gib),
    ("non_torch", re.compile(_NUM + r"\s*GiB for non-torch memory"), _gib),
    # 0.27+ (info): "X GiB for consumed memory (weights + non-torch), Y GiB for peak activation"
    # where Y holds the CUDA-graph estimate too (gpu_worker.py, 0.33 lines 748-750).
    ("consumed", re.compile(r"Actual usage is\s*" + _NUM + r"\s*GiB for consumed memory"), _gib),
    ("peak_with_graphs", re.compile(r"\(weights \+ non-torch\),\s*" + _NUM
                                    + r"\s*GiB for peak activation"), _gib),
    ("cuda_graphs_captured", re.compile(_NUM + r"\s*GiB for CUDAGraph memory"), _gib),
    ("total", re.compile(r"Free memory on device(?: [\w:]+)? \(" + _NUM + r"/" + _NUM
                         + r"\s*GiB\) on startup"), _gib),  # the last group: the total
    ("utilization", re.compile(r"Desired GPU memory utilization is \((\d?\.\d+)"), str),
    ("budget", re.compile(r"Desired GPU memory utilization is \(\d?\.\d+,\s*" + _NUM
                          + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"Current kv cache memory in use is\s*" + _NUM + r"\s*GiB"), _gib),
    ("kv_cache", re.compile(r"reserved\s*" + _NUM + r"\s*GiB memory for KV Cache as specified"),
     _gib),
)
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request:\s*"
                          + _NUM + r"x")
_NO_MEMORY = re.compile(r"No available memory for the cache blocks|EngineCore failed to start")
_VERSION = (re.compile(r"Initializing an? (?:(V[01]) )?LLM engine \(v?(\d+\.\d+[\w.+]*)\)"),
            re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+]*)"),
            re.compile(r"(?<![\w.])version\s+v?(0\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)"))
_ENGINE_CONFIG = re.compile(r"with config: (.*)")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})")
_GPU_NAME = re.compile(r"(?:GPU \d+(?:-\d+)?:|Device(?: name)?:|device_name=)\s*"
                       r"((?:NVIDIA|AMD|Tesla|Quadro)[^\n,()]*?)\s*(?:\(x\d+\))?\s*$")
_LEN_LINE = re.compile(r"Using max model len (\d+)")
_KV_MEMORY_FLAG = re.compile(r"reserved\s*" + _NUM + r"\s*GiB memory for KV Cache as specified")
_CHUNKED = re.compile(r"max_num_batched_tokens=(\d+)")
_CONFIG_KEYS = {"max_seq_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
                "pipeline_parallel_size": "pipeline_parallel_size", "dtype": "dtype",
                "data_parallel_size": "data_parallel_size",
                "quantization": "quantization", "enforce_eager": "enforce_eager",
                "kv_cache_dtype": "kv_cache_dtype", "model": "model",
                "enable_prefix_caching": "enable_prefix_caching",
                "chunked_prefill_enabled": "enable_chunked_prefill",
                "enable_chunked_prefill": "enable_chunked_prefill",
                "cpu_offload_gb": "cpu_offload_gb"}
# Flags that change a device's memory but that kvcalc's count does not model: read so
# that a check can say the log set them.
UNMODELLED_FLAGS = ("cpu_offload_gb", "speculative_config", "enable_lora", "hf_overrides",
                    "kv_offloading_size", "max_cudagraph_capture_size", "cuda_graph_sizes", "cudagraph_capture_sizes")
_FLAG_KEYS = ("model", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
              "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens",
              "kv_cache_dtype", "enforce_eager", "block_size", "quantization", "dtype",
              "enable_prefix_caching", "enable_chunked_prefill", "kv_cache_memory_bytes",
              "num_gpu_blocks_override", "sampler", "async_scheduling",
              "mamba_ssm_cache_dtype", "data_parallel_size", "enable_expert_parallel",
              "limit_mm_per_prompt", "mm_encoder_tp_mode", *UNMODELLED_FLAGS)
_GRAPH_PROFILING = re.compile(r"CUDA graph memory profiling "
                              r"(is enabled|is disabled|will be enabled)")


def _flat(text: str) -> str:
    """The log as one line of words, rank prefixes out: wrapped messages read whole."""
    return " ".join(_RANK.sub(" ", " ".join(_unwrapped(text))).split())



def parse_vllm_log(text: str) -> VllmLog:
    """Read a pasted start-up log. Raises KvcalcError when nothing in it is vLLM's."""
    if len(text) > MAX_LOG_CHARS:
        raise KvcalcError(f"the log is over {MAX_LOG_CHARS:,} characters; paste the start-up "
                          "part (up to 'Maximum concurrency')")
    found: dict[str, dict[str, object]] = {}  # name -> rank -> first value
    flags: dict[str, object] = {}
    version = engine = gpu_name = None
    concurrency = None
    refusal, fit, refused = "", None, False
    ranks: list[str] = []
    recognised = 0
    graph_estimate_subtracted = None

    def keep(name: str, rank: str, value) -> None:
        found.setdefault(name, {}).setdefault(rank, value)

    for rank, piece in _pieces(text):
        if rank not in ranks:
            ranks.append(rank)
        hit = False
        for name, rx, conv in _PATTERNS:
            for m in rx.finditer(piece):
                keep(name, rank, conv(m.group(m.lastindex)))
                hit = True
        m = _CONCURRENCY.search(piece)
        if m:
            keep("concurrency", rank, (_int(m.group(1)), float(m.group(2).replace(",", ""))))
            hit = True
        m = _REFUSE_V0.search(piece)
        if m and not refused:
            refused, refusal, fit = True, m.group(0), int(m.group(2))
            flags.setdefault("max_model_len", int(m.group(1)))
            hit = True
        m = _REFUSE_V1.search(piece)
        if m and not refused:
            refused, refusal, fit = True, m.group(1), int(m.group(3))
            flags.setdefault("max_model_len", int(m.group(2)))
            hit = True
        if _NO_MEMORY.search(piece) and not refused:
            refused, refusal = True, _NO_MEMORY.search(piece).group(0)
            hit = True
        for i, rx in enumerate(_VERSION):
            m = rx.search(piece)
            if m and version is None:
                if i == 0:
                    engine = (m.group(1) or "V0").lower()
                    version = m.group(2)
                else:
                    version = m.group(1)
                hit = True
        m = _NON_DEFAULT.search(piece)
        if m:
            _read_args(m.group(1), flags)
            hit = True
        m = _ENGINE_CONFIG.search(piece)
        if m and "LLM engine" in piece:
            _read_engine_config(m.group(1), flags)
        m = _GPU_NAME.search(piece)
        if m and gpu_name is None:
            gpu_name = m.group(1).strip()
        if "Using FlashInfer for top-p & top-k sampling" in piece:
            flags.setdefault("sampler", "flashinfer")
            hit = True
        elif re.search(r"Falling back to (?:the )?PyTorch-native", piece):
            flags.setdefault("sampler", "native")
            hit = True
        m = _KV_MEMORY_FLAG.search(piece)
        if m:
            flags.setdefault("kv_cache_memory_bytes", _gib(m.group(1)))
        m = _LEN_LINE.search(piece)
        if m:
            flags.setdefault("max_model_len", int(m.group(1)))
        m = _CHUNKED.search(piece)
        if m and "Chunked prefill is enabled" in piece:
            flags.setdefault("max_num_batched_tokens", int(m.group(1)))
        m = _GRAPH_PROFILING.search(piece)
        if m and graph_estimate_subtracted is None:
            graph_estimate_subtracted = m.group(1) == "is enabled"
            hit = True
        if hit or "vllm" in piece.lower():
            recognised += 1
    if not refused:  # a refusal wrapped over several lines (an exception's message)
        flat = " ".join(_RANK.sub(" ", " ".join(_unwrapped(text))).split())
        for rx, fit_group in ((_REFUSE_V1, 3), (_REFUSE_V0, 2)):
            m = rx.search(flat)
            if m:
                refused, fit = True, int(m.group(fit_group))
                refusal = m.group(1) if rx is _REFUSE_V1 else m.group(0)
                flags.setdefault("max_model_len", int(m.group(2 if rx is _REFUSE_V1 else 1)))
                recognised += 1
                break
    for m in _SERVE.finditer(_joined(text)):
        _read_command(m.group(1), flags)
        recognised += 1
    failure = _failure(_flat(text))
    if failure is not None and failure.kind != "unknown":
        recognised += 1
    if not recognised or not (found or version or refused or failure):
        raise KvcalcError("this does not look like a vLLM start-up log: no line vLLM prints "
                          "while loading the model and sizing its KV cache was found")

    notes: list[str] = []
    values: dict[str, object] = {}
    for name, by_rank in found.items():
        main = next((v for r, v in by_rank.items() if _main_rank(r)), None)
        values[name] = main if main is not None else next(iter(by_rank.values()))
        if len(set(map(str, by_rank.values()))) > 1:
            notes.append(f"ranks printed different {name.replace('_', ' ')}: "
                         + ", ".join(f"{r or 'main'} {_shown(name, v)}" for r, v in by_rank.items())
                         + "; the rank-0 figure is used")
    terms = {t: values[t] for t in TERMS if t in values}
    if ((failure is None or failure.kind == "unknown")
            and (values.get("num_gpu_blocks") == 0 or terms.get("kv_cache", 0) < 0)):
        # A negative "Available KV cache memory" is vLLM's "No available memory".
        failure = StartupFailure("no_kv_memory", "No available memory for the cache blocks")
    if failure is not None:
        if not refused or (refusal == "EngineCore failed to start" and failure.kind != "unknown"):
            refusal = failure.words
        refused = True
        if failure.kind == "free_memory":
            flags.setdefault("gpu_memory_utilization", failure.figures["gpu_memory_utilization"])
        elif failure.kind == "max_model_len_over_context":
            flags.setdefault("max_model_len", failure.figures["max_model_len"])
    if "consumed" in values and "weights" in terms and "non_torch" not in terms:
        terms["non_torch"] = values["consumed"] - terms["weights"]
    if "peak_with_graphs" in values and "activation_peak" not in terms:
        terms["activation_peak"] = values["peak_with_graphs"] - terms.get("cuda_graphs", 0)
    if "activation_peak" not in terms and "peak_torch" in values and "weights" in terms:
        # 0.6.4 prints the torch peak with the weights in it.
        terms["activation_peak"] = values["peak_torch"] - terms["weights"]
    if "utilization" in values:
        flags.setdefault("gpu_memory_utilization", values["utilization"])
    if "concurrency" in values:
        concurrency = values["concurrency"]
        flags.setdefault("max_model_len", concurrency[0])
    if engine is None:
        engine = _engine_from_format(values, text)
    if version is None:
        notes.append("the log does not print vLLM's version")
    return VllmLog(
        vllm_version=version, engine=engine, model=flags.get("model"), gpu_name=gpu_name,
        flags={k: flags[k] for k in _FLAG_KEYS if k in flags}, terms=terms,
        num_gpu_blocks=values.get("num_gpu_blocks"), kv_cache_tokens=values.get("kv_cache_tokens"),
        max_concurrency=concurrency[1] if concurrency else None,
        concurrency_len=concurrency[0] if concurrency else None,
        refused=refused, refusal=refusal, max_model_len_fit=fit, ranks=tuple(ranks),
        notes=tuple(notes), failure=failure, graphs_captured=values.get("cuda_graphs_captured"),
        graph_estimate_subtracted=graph_estimate_subtracted,
        encoder_budget=values.get("encoder_budget"), encoder_items=values.get("encoder_items"))


def _shown(name: str, value) -> str:
    if name in TERMS or name in ("peak_torch", "consumed", "peak_with_graphs",
                                 "cuda_graphs_captured"):
        return f"{value / GiB:.2f} GiB"
    return str(value)


def _engine_from_format(values: dict, text: str) -> str | None:
    if "Available KV cache memory" in text or "GPU KV cache size" in text:
        return "v1"
    if "Memory profiling results" in text or "model weights take" in text:
        return "v0"
    return None


def _read_args(text: str, flags: dict) -> None:
    """The dict vLLM logs as its non-default arguments (a Python literal; a value that is
    not one, such as an enum's repr, is skipped with its key)."""
    try:
        args = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        args = {}
        for m in re.finditer(r"'(\w+)':\s*('[^']*'|[\w.+-]+)", text):
            try:
                args[m.group(1)] = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError):
                continue
    if not isinstance(args, dict):
        return
    for key, value in args.items():
        if key == "model_tag" and "model" not in args:
            key = "model"
        if key == "limit_mm_per_prompt" and isinstance(value, dict):
            value = json.dumps(value)  # as --limit-mm-per-prompt takes it
        if key in UNMODELLED_FLAGS and not isinstance(value, (str, int, float, bool)):
            value = _clip(str(value))[:80]  # a dict or list: what it says, in a few words
        if key in _FLAG_KEYS and isinstance(value, (str, int, float, bool)):
            flags[key] = value


_SERVE = re.compile(r"(?:vllm serve|vllm\.entrypoints\.openai\.api_server)([^\n]*)")
_OPTION_NAMES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size",
                 "dp": "data_parallel_size"}


def _joined(text: str) -> str:
    """The log with shell line continuations joined, so a command is one line."""
    return re.sub(r"\\\s*\n\s*", " ", text)


def _read_command(text: str, flags: dict) -> None:
    """Flags of a `vllm serve MODEL --flag value ...` line as the user typed it."""
    words = text.split()
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            key, _, value = word.lstrip("-").partition("=")
            key = key.replace("-", "_")
            if key in ("tensor_parallel", "tensor_parallel_size"):
                key = "tensor_parallel_size"
            key = _OPTION_NAMES.get(key, key)
            if not value and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value, i = words[i + 1], i + 1
            if key in _FLAG_KEYS:
                flags.setdefault(key, _literal(value) if value else True)
        elif "model" not in flags and i == 0:
            flags["model"] = word
        i += 1


def _literal(text: str):
    text = text.strip("'\"")
    for conv in (int, float):
        try:
            return conv(text) if conv is int or "." in text else text
        except ValueError:
            continue
    return text


def _read_engine_config(text: str, flags: dict) -> None:
    """The engine's `key=value, ...` config line; flags already read win."""
    for m in re.finditer(r"(?:^|,\s*)(\w+)=('[^']*'|[^,]*)", text):
        key, raw = m.group(1), m.group(2).strip()
        if key not in _CONFIG_KEYS:
            continue
        name = _CONFIG_KEYS[key]
        value: object = raw.strip("'")
        if len(raw) > 1 and raw[0] == raw[-1] == "'":
            try:  # a repr: 'D:\\Models\\x' is D:\Models\x
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                pass
        if name in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size",
                    "data_parallel_size"):
            if not raw.isdigit():
                continue
            value = int(raw)
        elif name in ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill"):
            if raw not in ("True", "False"):
                continue
            value = raw == "True"
        elif name == "cpu_offload_gb":
            try:
                value = float(raw)
            except ValueError:
                continue
        elif name == "dtype":
            value = raw.replace("torch.", "")
        elif name == "quantization" and raw == "None":
            continue
        flags.setdefault(name, value)
