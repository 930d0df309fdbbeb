"""Why a TensorRT-LLM start-up failed, read from its log's words, and the fix in
`trtllm-serve`'s flags.

The messages, as the source prints them (NVIDIA/TensorRT-LLM; the PyTorch flow from 1.0):

* `_ExecutorMemoryMonitor._maybe_explain_if_oom` (tensorrt_llm/_torch/pyexecutor/
  py_executor_creator.py): an out-of-memory error while creating one component of the
  executor becomes "Executor creation failed due to insufficient GPU memory." with "The
  following component could not be created: NAME", "Total GPU memory (GiB): T", "Free GPU
  memory before component creation attempt (GiB): F", each component created before it
  ("name: before / after"), and `memory_type_tuning_suggestion` per component: Model
  "reduce max_num_tokens and/or shard the model weights across GPUs by enabling pipeline
  and/or tensor parallelism", Sampler "reduce max_seq_len and/or max_attention_window_size",
  KV cache "reduce free_gpu_memory_fraction", the estimation's initial KV cache and
  executor resources and the final executor resources "reduce max_num_tokens". The
  components are created in the order Model, (draft model), (guided decoder), Sampler,
  the estimation's KV cache, Drafter, the estimation's executor (its warm-up: autotuner,
  CUDA graphs), the profiling run ("Model resources created during usage"), then the KV
  cache and the executor resources for good; 1.0.0rc logs print their friendly names,
  later ones list the earlier components by their ExecutorMemoryType values.
* `PyTorchModelEngine` (tensorrt_llm/_torch/pyexecutor/model_engine.py): a max_seq_len
  above what the model's config supports is not refused but cut: "Specified
  self.max_seq_len=X is larger than what the model can support (Y). Setting max_seq_len to
  Y." (a later source keeps a larger value it is told to: "User specified max_seq_len is
  larger than the config in the model config file (Y). Setting max_seq_len to user's
  specified value X."). kvcalc reports it as a note, not a failure (`clamp`).
* `KVCacheManager.get_max_atten_window_upper_bound` (tensorrt_llm/_torch/pyexecutor/
  resource_manager.py): "Impossible to fit in any sequence in kvCache"; the C++ runtime
  before 0.9 (Triton): "maxTokensInPagedKvCache (N) must be large enough to process at least
  1 sequence to completion (i.e. must be larger than beam_width (W) * tokensPerBlock (T) *
  maxBlocksPerSeq (B))".
* torch's out-of-memory error elsewhere, placed by the step the log was at (weights:
  `load_single_module`, "Loading safetensors"; CUDA-graph warm-up: `_run_cuda_graph_warmup`,
  `_capture_generation_cuda_graphs`); the Hub's and transformers' errors for a model id or
  folder without a config.
"""

from __future__ import annotations

import re

from kvcalc.serving.failure import (Diagnosis, Failure, GiB, clip_words, gib_text, last_step,
                                    missing_model, torch_oom)

__all__ = ["clamp", "command_flags", "diagnose", "read_failure"]

_NUM = r"(\d+(?:\.\d+)?)"
_EXECUTOR = re.compile(r"Executor creation failed due to insufficient GPU memory\.")
_COMPONENT = re.compile(r"The following component could not be created: ([^\n]+)")
_TOTAL = re.compile(r"Total GPU memory \(GiB\): " + _NUM)
_FREE = re.compile(r"Free GPU memory before component creation attempt \(GiB\): " + _NUM)
_BEFORE = re.compile(r"^\s*([A-Za-z_][\w ()-]*?): " + _NUM + r" / " + _NUM + r"\s*$", re.M)
# the component's friendly name (1.0.0rc and later) -> the failure kind
_COMPONENTS = (
    (re.compile(r"^Model$|^Draft model", re.I), "oom_loading"),
    (re.compile(r"^Sampler$", re.I), "oom_sampler"),
    (re.compile(r"^Initial KV cache", re.I), "oom_kv_cache"),
    (re.compile(r"^KV cache$", re.I), "oom_kv_cache"),
    (re.compile(r"^Additional executor resources \(temporary", re.I), "oom_profile"),
    (re.compile(r"^Model resources created during usage", re.I), "oom_profile"),
    (re.compile(r"^Additional executor resources$", re.I), "oom_warmup"),
)
_TRITON = re.compile(r"maxTokensInPagedKvCache \((\d+)\) must be large enough to process at "
                     r"least 1 sequence to completion \(i\.e\. must be larger than beam_width "
                     r"\((\d+)\) \* tokensPerBlock \((\d+)\) \* maxBlocksPerSeq \((\d+)\)\)")
_NO_FIT = re.compile(r"Impossible to fit in any sequence in kvCache")
_CPP_OOM = re.compile(r"CUDA runtime error in [^\n]*?: out of memory")
_STEPS = (
    ("oom_loading", re.compile(r"load_single_module|load_weights|Loading safetensors|"
                               r"Loading weights|uses [\d.]+ GB for model weights|"
                               r"prefetching")),
    ("oom_profile", re.compile(r"Peak memory during memory usage profiling|"
                               r"configure_kv_cache_capacity|Running autotuner warmup")),
    ("oom_warmup", re.compile(r"Allocated [\d.]+ GiB for max tokens in paged KV cache")),
    ("oom_cuda_graphs", re.compile(r"_run_cuda_graph_warmup|_capture_generation_cuda_graphs|"
                                   r"cuda_graph_runner|Creating CUDA graph instances|"
                                   r"CUDA graph warmup")),
)
_MISSING = re.compile(
    r"(?P<path>\S+) does not appear to have a file named (?P<file>[\w./-]+)"
    r"|Repository Not Found for url: (?P<url>\S+)"
    r"|Incorrect path_or_model_id: '(?P<id>[^']*)'"
    r"|(?P<name>\S+) is not a local folder and is not a valid model identifier")
_STOPPED = re.compile(r"Failed to initialize executor on rank \d+|Executor worker returned "
                      r"error|Failed to create instance")
_CLAMPED = re.compile(r"Specified self\.max_seq_len=(\d+) is larger than what the model can "
                      r"support \((\d+)\)\. Setting max_seq_len to (\d+)")
_KEPT = re.compile(r"User specified max_seq_len is larger than the config in the model config "
                   r"file \((\d+)\)\. Setting max_seq_len to user's specified value (\d+)")
_COMMAND = re.compile(r"trtllm-(?:serve|bench)\b(.*)")
_COMMAND_FLAGS = {"--tp_size": "tp_size", "--pp_size": "pp_size", "--ep_size": "ep_size",
                  "--max_num_tokens": "max_num_tokens", "--max_batch_size": "max_batch_size",
                  "--max_seq_len": "max_seq_len",
                  "--kv_cache_free_gpu_memory_fraction": "free_gpu_memory_fraction",
                  "--kv_cache_free_gpu_mem_fraction": "free_gpu_memory_fraction"}


def command_flags(text: str) -> dict:
    """The flags of a `trtllm-serve` / `trtllm-bench` command quoted with the log (lines
    continued with "\\" joined), under TrtllmFlags names; the fraction as its text."""
    joined = re.sub(r"\\\s*\n", " ", text)
    out: dict = {}
    for m in _COMMAND.finditer(joined):
        words = m.group(1).replace("=", " ").split()
        for flag, value in zip(words, words[1:]):
            name = _COMMAND_FLAGS.get(flag)
            value = value.strip("'\"")
            if name is None or value.startswith("--"):
                continue
            if name == "free_gpu_memory_fraction":
                out.setdefault(name, value)
            elif value.isdigit():
                out.setdefault(name, int(value))
    return out


def clamp(text: str) -> dict:
    """The max_seq_len TensorRT-LLM was told and the one it kept, where it says it changed
    it (empty when it does not)."""
    m = _CLAMPED.search(text)
    if m:
        return {"max_seq_len_given": int(m.group(1)), "max_seq_len_model": int(m.group(2)),
                "max_seq_len": int(m.group(3))}
    m = _KEPT.search(text)
    if m:
        return {"max_seq_len_given": int(m.group(2)), "max_seq_len_model": int(m.group(1)),
                "max_seq_len": int(m.group(2))}
    return {}


def _executor(text: str, m: re.Match) -> Failure:
    tail = text[m.start():m.start() + 4000]
    figures: dict = {}
    kind = "oom"
    c = _COMPONENT.search(tail)
    if c:
        name = c.group(1).strip()
        figures["component"] = name
        kind = next((k for rx, k in _COMPONENTS if rx.search(name)), "oom")
    for rx, key in ((_TOTAL, "total_bytes"), (_FREE, "free_before_bytes")):
        found = rx.search(tail)
        if found:
            figures[key] = round(float(found.group(1)) * GiB)
    start = tail.find("Previously created components")
    if start >= 0:
        figures["created"] = [(n.strip(), round(float(a) * GiB), round(float(b) * GiB))
                              for n, a, b in _BEFORE.findall(tail[start:])]
    words = m.group(0) + (f" The following component could not be created: "
                          f"{figures['component']}" if "component" in figures else "")
    return Failure(kind, words, figures)


def read_failure(text: str) -> Failure | None:
    """The first failure the log shows (None: none shown)."""
    found: list[tuple[int, Failure]] = []
    m = _EXECUTOR.search(text)
    if m:
        found.append((m.start(), _executor(text, m)))
    m = _TRITON.search(text)
    if m:
        n, beam, tpb, blocks = (int(g) for g in m.groups())
        found.append((m.start(), Failure("kv_cache_too_small", clip_words(m.group(0)), {
            "max_tokens": n, "beam_width": beam, "tokens_per_block": tpb,
            "max_blocks_per_seq": blocks})))
    m = _NO_FIT.search(text)
    if m:
        found.append((m.start(), Failure("kv_cache_too_small", m.group(0))))
    oom = torch_oom(text)
    cpp = _CPP_OOM.search(text)
    if oom and not (found and found[0][0] <= oom[0]):
        start, end, figures = oom
        line = text.rfind("\n", 0, start) + 1
        found.append((start, Failure(last_step(text[:start], _STEPS),
                                     clip_words(text[line:end], 500),
                                     figures)))
    elif cpp and not found:
        found.append((cpp.start(), Failure(last_step(text[:cpp.start()], _STEPS),
                                           clip_words(cpp.group(0)))))
    m = _MISSING.search(text)
    if m:
        found.append((m.start(), missing_model(m, ("path", "id", "name", "url"))))
    if found:
        return min(found, key=lambda f: f[0])[1]
    m = _STOPPED.search(text)
    return Failure("unknown", m.group(0)) if m else None


def _fraction(settings: dict, release: str | None) -> str:
    """The KV fraction the start-up ran with: the log's or command's, else the release's
    default (kvcalc.serving.trtllm.rules)."""
    if settings.get("free_gpu_memory_fraction"):
        return str(settings["free_gpu_memory_fraction"])
    from kvcalc.serving import DEFAULT_RELEASE
    from kvcalc.serving.trtllm.rules import rules_for

    num, den = rules_for(release or DEFAULT_RELEASE["tensorrt-llm"]) \
        .default_free_gpu_memory_fraction()
    return f"{num / den:g}"


def _halved(settings: dict, name: str, flag: str) -> tuple[str, dict]:
    value = settings.get(name)
    if value:
        half = max(int(value) // 2, 1)
        return f"{flag} {half} (from {value})", {name: half}
    return f"a smaller {flag}", {}


def diagnose(failure: Failure | None, settings: dict, *,
             release: str | None = None) -> Diagnosis | None:
    """The cause and the fix for `failure` (read_failure's), given the settings the log
    and its command state (TrtllmFlags names: tp_size, max_num_tokens, max_batch_size,
    max_seq_len, free_gpu_memory_fraction)."""
    f = failure
    if f is None:
        return None
    fig, counted = dict(f.figures), {}
    comp = fig.get("component")
    free = fig.get("free_before_bytes")
    where = (f" ({free / GiB:.2f} GiB was free before it, of {fig['total_bytes'] / GiB:.2f} "
             "GiB)" if free is not None and "total_bytes" in fig else "")
    fraction = _fraction(settings, release)
    tp = settings.get("tp_size")
    more = f"--tp_size {int(tp) * 2} (from {tp})" if tp else "a larger --tp_size"
    if f.kind == "oom_kv_cache":
        lower = max(round(float(fraction) - 0.1, 2), 0.1)
        cause = (f"out of memory creating the {comp or 'KV cache'}{where}: TensorRT-LLM sizes "
                 f"it as --kv_cache_free_gpu_memory_fraction {fraction} of the memory its "
                 "profiling run found free, and less was free when it allocated it")
        fix = (f"--kv_cache_free_gpu_memory_fraction {lower:g} (from {fraction}), or free the "
               "GPU of other processes")
        if comp and comp.lower().startswith("initial"):
            part, c = _halved(settings, "max_num_tokens", "--max_num_tokens")
            fix = f"{part}: the estimation's small cache holds one batch of it; or {fix}"
            counted.update(c)
        counted["free_gpu_memory_fraction"] = lower
    elif f.kind in ("oom_warmup", "oom_cuda_graphs"):
        what = ("the executor's warm-up (autotuning and CUDA-graph capture) after the KV "
                "cache took its share" if f.kind == "oom_warmup" else "capturing CUDA graphs "
                "in the warm-up, after the KV cache took its share")
        cause = (f"out of memory in {what}{where}: the warm-up runs in the memory "
                 f"--kv_cache_free_gpu_memory_fraction {fraction} leaves out")
        tokens, c1 = _halved(settings, "max_num_tokens", "--max_num_tokens")
        batch, c2 = _halved(settings, "max_batch_size", "--max_batch_size")
        lower = max(round(float(fraction) - 0.1, 2), 0.1)
        fix = (f"{tokens}, {batch} (it bounds cuda_graph_config.max_batch_size in "
               f"--extra_llm_api_options), or --kv_cache_free_gpu_memory_fraction {lower:g} "
               f"(from {fraction}) to leave the warm-up more")
        counted.update(c1, **c2, free_gpu_memory_fraction=lower)
    elif f.kind == "oom_profile":
        cause = (f"out of memory in the profiling run that sizes the KV cache{where}: one "
                 "forward pass of --max_num_tokens tokens (and the estimation executor's "
                 "warm-up)")
        part, c = _halved(settings, "max_num_tokens", "--max_num_tokens")
        fix = f"{part}, or free the GPU of other processes"
        counted.update(c)
    elif f.kind == "oom_loading":
        tried = (f" (it asked for {gib_text(fig['tried_bytes'])} more with "
                 f"{gib_text(fig['free_bytes'])} free of {gib_text(fig['total_bytes'])})"
                 if "free_bytes" in fig and "tried_bytes" in fig else "")
        cause = f"out of memory loading the weights{where}{tried}"
        fix = (f"shard them over more GPUs ({more}, or --pp_size), serve a quantized "
               "checkpoint, or free the GPU of other processes (`nvidia-smi`: each rank must "
               "see its own GPU)")
    elif f.kind == "oom_sampler":
        cause = (f"out of memory creating the sampler{where}: its buffers grow with the "
                 "batch and the length")
        seq, c1 = _halved(settings, "max_seq_len", "--max_seq_len")
        batch, c2 = _halved(settings, "max_batch_size", "--max_batch_size")
        fix = f"{seq} or {batch}"
        counted.update(c1, **c2)
    elif f.kind == "kv_cache_too_small":
        if "max_tokens" in fig:
            n, beam, tpb = fig["max_tokens"], fig["beam_width"], fig["tokens_per_block"]
            need = beam * tpb * fig["max_blocks_per_seq"]
            fit = n // (beam * tpb) * tpb
            cause = (f"the KV cache holds {n:,} tokens, fewer than one sequence of the engine's "
                     f"maximum length needs ({beam} x {tpb} x {fig['max_blocks_per_seq']} = "
                     f"{need:,})")
            fix = (f"rebuild the engine with --max_seq_len {fit} or less, or give the KV cache "
                   "more memory (a higher kv_cache_free_gpu_mem_fraction, fewer other "
                   "processes on the GPU)")
            counted["max_seq_len"] = fit
        else:
            cause = "the KV cache cannot hold one sequence of --max_seq_len at the beam width"
            fix = ("lower --max_seq_len (or the beam width), or raise "
                   f"--kv_cache_free_gpu_memory_fraction (now {fraction})")
    elif f.kind == "missing_model":
        name = fig.get("model") or "the model"
        what = f" ({fig['file']} is missing)" if fig.get("file") else ""
        cause = (f"TensorRT-LLM found no model files at {name}{what}: a wrong id or path, or "
                 "no access")
        fix = ("check the model argument: a Hub id (org/name) or a local folder with "
               "config.json and the weights (or a built engine's folder); download it first "
               "(`hf download NAME`); for a gated repository accept its licence and set "
               "HF_TOKEN")
    elif f.kind == "oom":
        cause = (f"out of memory creating the executor's {comp}{where}" if comp else
                 "CUDA out of memory, at a step the lines given do not show")
        fix = ("lower --max_num_tokens, --max_batch_size or --max_seq_len, or free the GPU "
               "of other processes")
    else:
        cause = "TensorRT-LLM stopped, but the lines given do not say why"
        fix = ("paste the log from the first [E] line or traceback of the failing rank: the "
               "cause is printed there")
    return Diagnosis(engine="tensorrt-llm", kind=f.kind, cause=cause, fix=fix, words=f.words,
                     figures=fig, counted=counted)
