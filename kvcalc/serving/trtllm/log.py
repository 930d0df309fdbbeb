"""TensorRT-LLM start-up logs read back: text in, a record out (pure, no file access).

Both runtimes and every release's wording that tests/data/trtllm holds, each line
format quoted in words from the source that prints it (NVIDIA/TensorRT-LLM, the
snapshots of kvcalc.serving.trtllm.rules):

* C++ `KVCacheManager` (kvCacheManager.cpp): "Memory usage when calculating max tokens
  in paged kv cache: total: T GiB, available: A GiB" (available before the fraction);
  "Number of blocks in KV cache primary pool: N" and "... secondary pool: N, onboard
  blocks ..." (the single-window code); "Max KV cache pages per sequence: N" (2024) or
  "Max KV cache blocks per sequence: B [window size=W], tokens per block=T, primary
  blocks=P, secondary blocks=S, max sequence length=L" (window-aware code); "Number of
  tokens per block: T."; "[MemUsageChange] Allocated X GiB for max tokens in paged KV
  cache (N)." (N = primary blocks x tokens per block; some pasted logs lack the period).
* `TrtGptModelInflightBatching` (C++): "Loaded engine size: X MiB", "[MemUsageChange]
  Allocated X MiB for execution context memory.", "TensorRT-managed allocation in
  IExecutionContext creation: ... now: CPU C, GPU G (MiB)", "[MemUsageChange] Allocated
  X GB|MB GPU memory for runtime buffers." and "... for decoder.", "TRTGptModel
  maxBatchSize: N" (and maxNumSequences, maxBeamWidth, maxSequenceLen, maxNumTokens,
  maxInputLen), "Engine version V found in the config file".
* the PyTorch flow (`_torch/pyexecutor/_util.py`, 0.19-1.3): "Peak memory during memory
  usage profiling (torch + non-torch): P GiB, available KV cache memory when calculating
  max tokens: A GiB" then, from 0.20.0, ", fraction is set F, kv size is S" and "device
  total memory T GiB" (after ", " in 0.20.0, after ". " from 1.1.0rc6, which adds ", ,
  tmp kv_mem M GiB"; newer: "kv size per token is S" and "temporary kv cache memory
  during profiling M GiB"); "Memory used after loading model weights (inside torch) in
  memory usage profiling: X GiB" and "(outside torch)"; "Memory dynamically allocated
  during inference (inside torch) ...: X GiB"; "Memory used outside torch (e.g., NCCL
  and CUDA graphs) ...: X GiB" (~0.19: "Memory used outside torch in memory usage
  profiling"); "Estimated max tokens in KV cache : N" (up to 0.20) or "Estimated max
  memory in KV cache : X GiB" (1.1+: the available memory after the caps); the pool's "Both free_gpu_memory_fraction and
  max_tokens are set (to F and N[ with free memory X GiB of total memory Y GiB],
  respectively)"; "max_tokens is set by kv_cache_config.max_tokens: N"; "max_seq_len=L,
  max_num_requests=R, max_num_tokens=T[, max_batch_size=B]"; "Attention window size X
  exceeds upper bound Y for available blocks. Reducing to Y."; "Adjusted max_seq_len to N".
* versions: "[TensorRT-LLM] TensorRT-LLM version: V" (the import banner; "TensorRT LLM
  version: V" from 1.2, as the 1.2.0rc2, 1.2.1 and 1.3.0rc0 banners in public logs print
  it), "Engine
  version V found", trtllm-bench's "TensorRT-LLM Version: V" and its settings summary
  (Dtype, KV Cache Dtype, Quantization, Max Sequence Length, TP Size, PP Size, Max
  Runtime Batch Size, Max Runtime Tokens, KV Memory Percentage).
* before 0.9 (C++ runtime of 0.5-0.8): "Allocate N bytes for k/v cache.", "Using N
  [total] tokens in paged KV cache[, and B blocks per sequence]", and Triton's refusal
  "maxTokensInPagedKvCache (N) must be large enough to process at least 1 sequence to
  completion (i.e. must be larger than beam_width (W) * tokensPerBlock (T) *
  maxBlocksPerSeq (B))".

The window-aware line's "secondary blocks=S" is absent in some quoted logs (a 1.2.1 log
in lmontigny/lm7 docs/tensorrt-llm.md), so each of its fields is read on its own. A line a
page wrapped (an indented continuation after a TensorRT-LLM line that does not end in ".")
is joined back before reading.

Figures keep the log's unit in their name and its printed value (GiB as printed, to
two decimals; "GB"/"MB" where the log says so); the fraction stays the text printed.
"""

from __future__ import annotations

import re
from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.failure import Failure
from kvcalc.serving.trtllm.fail import clamp, command_flags, read_failure

__all__ = ["Beside", "TrtllmLog", "beside", "is_trtllm_log", "read_log", "stated_flags"]

_N = r"(\d+(?:\.\d+)?)"
_I = r"(\d+)"

# (pattern, ((figure name, group, kind), ...)); kind: int, float, str
_LINES = (
    (r"Memory usage when calculating max tokens in paged kv cache: total: " + _N
     + r" GiB, available: " + _N + r" GiB", (("total_gib", 1, float), ("available_gib", 2, float))),
    (r"Number of blocks in KV cache primary pool: " + _I, (("blocks", 1, int),)),
    (r"Number of blocks in KV cache secondary pool: " + _I, (("secondary_blocks", 1, int),)),
    (r"Max KV cache (?:pages|blocks) per sequence: " + _I, (("max_pages_per_seq", 1, int),)),
    (r"\[window size=" + _I + r"\]", (("window_size", 1, int),)),
    (r"tokens per block=" + _I + r", primary blocks=" + _I,
     (("tokens_per_block", 1, int), ("blocks", 2, int))),
    (r"primary blocks=\d+, secondary blocks=" + _I, (("secondary_blocks", 1, int),)),
    (r"blocks=\d+, max sequence length=" + _I, (("max_seq_len", 1, int),)),
    (r"Number of tokens per block: " + _I, (("tokens_per_block", 1, int),)),
    (r"Allocated " + _N + r" GiB for max tokens in paged KV cache \(" + _I + r"\)",
     (("kv_cache_gib", 1, float), ("max_tokens", 2, int))),
    (r"Loaded engine size: " + _I + r" MiB", (("engine_size_mib", 1, int),)),
    (r"Allocated " + _N + r" MiB for execution context memory",
     (("execution_context_mib", 1, float),)),
    (r"IExecutionContext creation: .*now: CPU \d+, GPU " + _I + r" \(MiB\)",
     (("trt_managed_gpu_mib", 1, int),)),
    (r"Allocated " + _N + r" GB GPU memory for runtime buffers",
     (("runtime_buffers_gb", 1, float),)),
    (r"Allocated " + _N + r" MB GPU memory for runtime buffers",
     (("runtime_buffers_mb", 1, float),)),
    (r"Allocated " + _N + r" GB GPU memory for decoder", (("decoder_gb", 1, float),)),
    (r"Allocated " + _N + r" MB GPU memory for decoder", (("decoder_mb", 1, float),)),
    (r"Peak memory during memory usage profiling \(torch \+ non-torch\): " + _N
     + r" GiB, available KV cache memory when calculating max tokens: " + _N + r" GiB",
     (("peak_gib", 1, float), ("available_gib", 2, float))),
    (r"fraction is set ([0-9.eE+-]+), kv size (?:per token )?is " + _I,
     (("fraction", 1, str), ("kv_size_bytes_per_token", 2, int))),
    (r"device total memory " + _N + r" GiB", (("device_total_gib", 1, float),)),
    (r"(?:tmp kv_mem|temporary kv cache memory during profiling) " + _N + r" GiB",
     (("tmp_kv_gib", 1, float),)),
    (r"Memory used after loading model weights \(inside torch\) in memory usage profiling: "
     + _N + r" GiB", (("weights_inside_torch_gib", 1, float),)),
    (r"Memory used after loading model weights \(outside torch\) in memory usage profiling: "
     + _N + r" GiB", (("weights_outside_torch_gib", 1, float),)),
    (r"Memory dynamically allocated during inference \(inside torch\) in memory usage "
     r"profiling: " + _N + r" GiB", (("dynamic_inside_torch_gib", 1, float),)),
    (r"Memory used outside torch (?:\(e\.g\., NCCL and CUDA graphs\) )?in memory usage "
     r"profiling: " + _N + r" GiB", (("outside_torch_gib", 1, float),)),
    (r"Estimated max tokens in KV cache ?: " + _I, (("estimated_max_tokens", 1, int),)),
    (r"Estimated max memory in KV cache ?: " + _N + r" GiB",
     (("estimated_max_memory_gib", 1, float),)),
    (r"Both free_gpu_memory_fraction and max_tokens are set \(to ([0-9.eE+-]+) and " + _I,
     (("fraction", 1, str), ("estimated_max_tokens", 2, int))),
    (r"with free memory " + _N + r" ?GiB of total memory " + _N,
     (("free_gib", 1, float), ("device_total_gib", 2, float))),
    (r"max_tokens is set by kv_cache_config\.max_tokens: " + _I, (("max_tokens_given", 1, int),)),
    (r"max_seq_len=" + _I + r", max_num_requests=" + _I + r", max_num_tokens=" + _I,
     (("max_seq_len", 1, int), ("max_num_requests", 2, int), ("max_num_tokens", 3, int))),
    (r"max_num_tokens=\d+, max_batch_size=" + _I, (("max_batch_size", 1, int),)),
    (r"exceeds upper bound \d+ for available blocks\. Reducing to " + _I,
     (("attention_window_reduced_to", 1, int),)),
    (r"Adjusted max_seq_len to " + _I, (("max_seq_len_adjusted", 1, int),)),
    (r"Allocate " + _I + r" bytes for k/v cache", (("kv_cache_bytes", 1, int),)),
    (r"Using " + _I + r" (?:total )?tokens in paged KV cache", (("max_tokens", 1, int),)),
    (r"tokens in paged KV cache, and " + _I + r" blocks per sequence",
     (("blocks_per_seq", 1, int),)),
    (r"must be larger than beam_width \(" + _I + r"\) \* tokensPerBlock \(" + _I
     + r"\) \* maxBlocksPerSeq \(" + _I + r"\)",
     (("beam_width", 1, int), ("tokens_per_block", 2, int), ("blocks_per_seq", 3, int))),
    (r"KV Memory Percentage:\s+([0-9.]+%)", (("kv_memory_percentage", 1, str),)),
)
_COMPILED = tuple((re.compile(p), fields) for p, fields in _LINES)

# settings the log states: (pattern, setting name, kind)
_SETTINGS = (
    (r"TRTGptModel maxBatchSize: " + _I, "max_batch_size", int),
    (r"TRTGptModel maxNumSequences: " + _I, "max_num_sequences", int),
    (r"TRTGptModel maxBeamWidth: " + _I, "max_beam_width", int),
    (r"TRTGptModel maxSequenceLen: " + _I, "max_seq_len", int),
    (r"TRTGptModel maxNumTokens: " + _I, "max_num_tokens", int),
    (r"TRTGptModel maxInputLen: " + _I, "max_input_len", int),
    (r"max_seq_len=" + _I + r", max_num_requests", "max_seq_len", int),
    (r"max_num_requests=" + _I, "max_batch_size", int),
    (r"max_num_requests=\d+, max_num_tokens=" + _I, "max_num_tokens", int),
    (r"Number of tokens per block: " + _I, "tokens_per_block", int),
    (r"tokens per block=" + _I, "tokens_per_block", int),
    (r"fraction is set ([0-9.eE+-]+)", "free_gpu_memory_fraction", str),
    (r"Both free_gpu_memory_fraction and max_tokens are set \(to ([0-9.eE+-]+)",
     "free_gpu_memory_fraction", str),
    (r"max_tokens is set by kv_cache_config\.max_tokens: " + _I, "max_tokens", int),
    (r"^\s*Dtype:\s+(\S+)", "dtype", str),
    (r"KV Cache Dtype:\s+(\S+)", "kv_cache_dtype", str),
    (r"Quantization:\s+(\S+)", "quantization", str),
    (r"Max Sequence Length:\s+" + _I, "max_seq_len", int),
    (r"Max Input Length:\s+" + _I, "max_input_len", int),
    (r"TP Size:\s+" + _I, "tp_size", int),
    (r"PP Size:\s+" + _I, "pp_size", int),
    (r"Max Runtime Batch Size:\s+" + _I, "max_batch_size", int),
    (r"Max Runtime Tokens:\s+" + _I, "max_num_tokens", int),
    (r"KV Memory Percentage:\s+([0-9.]+)%", "kv_memory_percentage", str),
    (r"tokensPerBlock \(" + _I + r"\)", "tokens_per_block", int),
    (r"beam_width \(" + _I + r"\)", "max_beam_width", int),
)
_COMPILED_SETTINGS = tuple((re.compile(p), name, kind) for p, name, kind in _SETTINGS)

_VERSIONS = (
    re.compile(r"\[TensorRT-LLM\] TensorRT[- ]LLM version: (\S+)"),
    re.compile(r"Engine version (\S+) found in the config file"),
    re.compile(r"TensorRT-LLM Version:\s+(\S+)"),
)
_PYTORCH = re.compile(r"Peak memory during memory usage profiling|max_num_requests=|"
                      r"\[TRT-LLM\] \[[IWE]\]|Memory used after loading model weights")
_ENGINE = re.compile(r"Loaded engine size|Engine version \S+ found|TRTGptModel |"
                     r"IExecutionContext|Allocate \d+ bytes for k/v cache")
_REFUSED = re.compile(r"must be large enough to process at least 1 sequence|"
                      r"Failed to create instance|CUDA out of memory|OutOfMemoryError|"
                      r"CUDA error: out of memory")


_MARK = re.compile(r"\[TensorRT-LLM\]|\[TRT-LLM\]")
# Lines only TensorRT-LLM prints, a failed start-up's included (its errors, its commands).
_FAILED_MARK = re.compile(r"Executor creation failed due to insufficient GPU memory|"
                          r"tensorrt_llm/|trtllm-serve|trtllm-bench|maxTokensInPagedKvCache|"
                          r"Impossible to fit in any sequence in kvCache")
_KEY_VALUE = re.compile(r"[\w ()/-]+:\s")


def is_trtllm_log(text: str) -> bool:
    """Whether `text` holds a TensorRT-LLM line ("[TensorRT-LLM]" from the C++ logger,
    "[TRT-LLM]" from the Python one), its failure messages or its commands."""
    return bool(_MARK.search(text) or _FAILED_MARK.search(text))


@record
class TrtllmLog:
    """What one TensorRT-LLM start-up log states. `figures` and `settings` hold every
    value in the order first met (a later line with the same name replaces it: the
    pool's final figures follow the estimation run's)."""

    version: str | None
    backend: str | None  # "pytorch", "tensorrt", None: not told by the lines
    settings: tuple[tuple[str, object], ...]
    figures: tuple[tuple[str, object], ...]
    refused: bool
    refusal: str = ""
    failure: Failure | None = None  # why it did not start (kvcalc.serving.trtllm.fail)
    clamp: dict = field(default_factory=dict)  # max_seq_len told / the model's / kept
    command: dict = field(default_factory=dict)  # flags of a trtllm-serve command quoted

    @property
    def figure(self) -> dict:
        return dict(self.figures)

    @property
    def setting(self) -> dict:
        return dict(self.settings)


def _put(store: dict, name: str, value) -> None:
    store.pop(name, None)
    store[name] = value


def _unwrapped(text: str) -> list[str]:
    """The log's lines, a line a page wrapped joined back: an indented line continues the
    one before it when that one is a TensorRT-LLM line that does not end a sentence (".")
    and the indented one is not a "Key: value" row (docs that quote a log wrap "... in
    paged" / "  KV cache (N)."). Other indented lines (trtllm-bench's summary, tables)
    stay their own."""
    out: list[str] = []
    for line in text.splitlines():
        if (out and line[:1] in (" ", "\t") and line.strip()
                and not _KEY_VALUE.match(line.strip())
                and _MARK.search(out[-1]) and not out[-1].rstrip().endswith(".")):
            out[-1] = out[-1].rstrip() + " " + line.strip()
        else:
            out.append(line)
    return out


def read_log(text: str) -> TrtllmLog:
    """Read a start-up log (any release, either runtime): the version it prints, the
    settings it states, every figure. Lines the reader does not know are skipped."""
    figures: dict = {}
    settings: dict = {}
    version = None
    pytorch = engine = False
    refusal = ""
    for line in _unwrapped(text):
        for pattern, fields in _COMPILED:
            m = pattern.search(line)
            if m:
                for name, group, kind in fields:
                    _put(figures, name, kind(m.group(group)))
        for pattern, name, kind in _COMPILED_SETTINGS:
            m = pattern.search(line)
            if m:
                _put(settings, name, kind(m.group(1)))
        if version is None:
            for pattern in _VERSIONS:
                m = pattern.search(line)
                if m:
                    version = m.group(1).rstrip(".,")
                    break
        pytorch = pytorch or bool(_PYTORCH.search(line))
        engine = engine or bool(_ENGINE.search(line))
        if not refusal and _REFUSED.search(line):
            refusal = line.strip()
    failure = read_failure(text)
    if failure is not None and not refusal:
        refusal = failure.words
    figures["refused"] = bool(refusal)
    backend = "tensorrt" if engine else "pytorch" if pytorch else None
    return TrtllmLog(version, backend, tuple(settings.items()), tuple(figures.items()),
                     bool(refusal), refusal, failure=failure, clamp=clamp(text),
                     command=command_flags(text))


def _fraction_text(printed: str) -> str:
    """The fraction a user gave, from the float32 the C++ config prints: the shortest
    decimal of at most 6 digits whose float32 is the printed value ("0.8999999761581421"
    -> "0.9"); the printed text otherwise."""
    from kvcalc.serving.trtllm.rules import float32_ratio

    value = float(printed)
    num, den = value.as_integer_ratio()
    for digits in range(1, 7):
        text = f"{value:.{digits}f}"
        n, d = (int(text.replace(".", "")), 10 ** digits)
        if float32_ratio(n, d) == (num, den) or (n * den == num * d):
            return text.rstrip("0").rstrip(".") if "." in text else text
    return printed


def stated_flags(log: TrtllmLog) -> dict:
    """TrtllmFlags' fields the log states, under those names (for a count "from what
    the log says": the figures stay out of it)."""
    s = log.setting
    out: dict = {}
    if log.backend is not None:
        out["backend"] = log.backend
    for name in ("max_batch_size", "max_num_tokens", "max_seq_len", "tokens_per_block",
                 "max_tokens"):
        if name in s:
            out[name] = s[name]
    if "free_gpu_memory_fraction" in s:
        out["free_gpu_memory_fraction"] = _fraction_text(s["free_gpu_memory_fraction"])
    elif "kv_memory_percentage" in s:
        pct = s["kv_memory_percentage"]
        out["free_gpu_memory_fraction"] = f"{float(pct) / 100:g}"
    kv = str(s.get("kv_cache_dtype", "")).lower()
    if kv in ("fp8", "float8", "fp8_e4m3"):
        out["kv_cache_dtype"] = "fp8"
    elif kv in ("float16", "fp16", "half"):
        out["kv_cache_dtype"] = "fp16"
    elif kv in ("bfloat16", "bf16"):
        out["kv_cache_dtype"] = "bf16"
    return out


@record
class Beside:
    """One logged figure and kvcalc's count of it, in the log's unit."""

    name: str
    logged: object
    counted: object  # None: kvcalc does not count this figure
    ratio: float | None  # counted / logged


_GIB, _MIB, _GB, _MB = 1 << 30, 1 << 20, 10 ** 9, 10 ** 6


def _counted(name: str, c) -> object:
    """kvcalc's value of the figure `name` from a ServingCount `c` (None: not counted)."""
    mem = c.memory
    pools = dict(c.pools)
    flags = dict(c.flags)
    pytorch = flags.get("backend") == "pytorch"

    def gib(term):
        return None if term not in mem else round(mem[term] / _GIB, 2)

    table = {
        "max_tokens": c.kv_cache_tokens,
        "blocks": pools.get("blocks"),
        "tokens_per_block": c.page_size,
        "kv_cache_gib": gib("paged_kv_cache"),
        "kv_cache_bytes": mem.get("paged_kv_cache"),
        "total_gib": gib("device_total_memory" if pytorch else "total"),
        "device_total_gib": gib("device_total_memory"),
        "available_gib": gib("available_kv_cache_memory" if pytorch else "available"),
        "estimated_max_memory_gib": gib("available_kv_cache_memory") if pytorch else None,
        "peak_gib": gib("peak_memory"),
        "tmp_kv_gib": gib("tmp_kv_mem"),
        "weights_inside_torch_gib": gib("model_weights_inside_torch"),
        "dynamic_inside_torch_gib": gib("dynamic_inside_torch"),
        "outside_torch_gib": gib("outside_torch"),
        "kv_size_bytes_per_token": pools.get("kv_size_per_token"),
        "estimated_max_tokens": pools.get("estimated_max_tokens"),
        "engine_size_mib": None if "engine_size" not in mem else mem["engine_size"] // _MIB,
        "execution_context_mib": (None if "execution_context" not in mem
                                  else round(mem["execution_context"] / _MIB, 2)),
        "max_seq_len": flags.get("max_seq_len"),
        "max_num_requests": flags.get("max_batch_size"),
        "max_batch_size": flags.get("max_batch_size"),
        "max_num_tokens": flags.get("max_num_tokens"),
        "max_pages_per_seq": -(-c.context_len // c.page_size) if c.page_size else None,
        "refused": not c.starts,
    }
    return table.get(name)


def beside(log: TrtllmLog, counted) -> tuple[Beside, ...]:
    """Each logged figure with kvcalc's count of it (`counted`: a ServingCount from
    kvcalc.serving.trtllm.count), what `kvcalc check` prints for a TensorRT-LLM log."""
    rows = []
    for name, logged in log.figures:
        value = _counted(name, counted)
        ratio = None
        if (value is not None and not isinstance(value, bool)
                and isinstance(logged, (int, float)) and not isinstance(logged, bool)
                and logged):
            ratio = value / logged
        rows.append(Beside(name, logged, value, ratio))
    return tuple(rows)
