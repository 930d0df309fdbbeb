"""Why an SGLang start-up failed, read from its log's words, and the fix in SGLang's flags.

The messages, as the wheels read print them (0.4.3.post2, 0.5.4; newer wording where a
public log shows it):

* `ModelConfig` (configs/model_config.py; `_derive_context_length` in 0.5.4): a
  --context-length above the one derived from the model's config raises "User-specified
  context_length (N) is greater than the derived context_length (M). ... To allow overriding
  this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"; with the
  variable set the same words are a warning, prefixed "Warning: ", and the start goes on.
* `ModelRunner.init_torch_distributed` (model_executor/model_runner.py): at tp > 1, when
  the least free memory of any rank is under 0.9 x this rank's, "The memory capacity is
  unbalanced. Some GPUs may be occupied by other processes." (0.5.4 adds
  "min_per_gpu_memory=..., local_gpu_memory=..., local_gpu_memory * 0.9=..." and reads
  SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1 to warn instead).
* `ModelRunner.init_memory_pool` (after `profile_max_num_token`: rest = free after the
  weights - free at start x (1 - mem_fraction_static)): a pool of no tokens raises "Not enough
  memory. Please try to increase --mem-fraction-static." (0.5.4 adds "Current value:
  self.server_args.mem_fraction_static=F"); newer builds name the floor themselves: "Loaded
  weights leave no GPU memory for the KV cache under --mem-fraction-static=F. Raise
  --mem-fraction-static above X (minimum viable = 1 - available/pre = Y)."
* `CudaGraphRunner.__init__` (model_executor/cuda_graph_runner.py): "Capture cuda graph
  failed: <the error>" and "Possible solutions:" (0.4.3: --disable-cuda-graph, a smaller
  --mem-fraction-static, no --enable-torch-compile, --cuda-graph-max-bs 32; 0.5.4's
  CUDA_GRAPH_CAPTURE_FAILED_MSG: --mem-fraction-static 0.8 or 0.7, --cuda-graph-max-bs 16,
  no torch compile, --disable-cuda-graph).
* torch's out-of-memory error anywhere else, placed by the step the log was at ("Load weight
  begin" / `load_model`: loading the weights); transformers' and the Hub's errors for a
  model id or folder without a config (hf_transformers_utils.get_config).
"""

from __future__ import annotations

import math
import re

from kvcalc.serving.failure import (Diagnosis, Failure, clip_words, gib_text, last_step,
                                    missing_model, torch_oom)

__all__ = ["command_flags", "diagnose", "read_failure"]

_CONTEXT = re.compile(r"(Warning: )?User-specified context_length \((\d+)\) is greater than "
                      r"the derived context_length \((\d+)\)")
_UNBALANCED = re.compile(r"The memory capacity is unbalanced\.?(?: Some GPUs may be occupied "
                         r"by other processes\.)?(?:\s*min_per_gpu_memory=(\d+(?:\.\d+)?), "
                         r"local_gpu_memory=(\d+(?:\.\d+)?))?")
_NOT_ENOUGH = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static\.?"
                         r"(?: Current value: (?:self\.server_args\.)?mem_fraction_static="
                         r"(\d+(?:\.\d+)?))?")
_LEAVE_NONE = re.compile(r"Loaded weights leave no GPU memory for the KV cache under "
                         r"--mem-fraction-static=(\d+(?:\.\d+)?)\.?(?:\s*Raise "
                         r"--mem-fraction-static above (\d+(?:\.\d+)?) \(minimum viable = "
                         r"[^)]*?(\d+(?:\.\d+)?)\))?")
_HYBRID = re.compile(r"Not enough GPU memory for hybrid (?:\(mamba/linear-attention\) )?state "
                     r"cache")
_CAPTURE = re.compile(r"Capture (?:piecewise )?cuda graph failed: ?", re.IGNORECASE)
_STEPS = (
    ("oom_loading", re.compile(r"Load weight begin|\bload_model\b|Loading safetensors|"
                               r"load_weights|Using Transformers backend")),
    ("oom_kv_cache", re.compile(r"Load weight end|init_memory_pool|KV Cache is allocated")),
    ("oom_cuda_graphs", re.compile(r"Capture cuda graph begin|cuda_graph_runner|"
                                   r"capture_one_batch_size|Capturing batches")),
    ("oom", re.compile(r"Capture cuda graph end|max_total_num_tokens=")),
)
_MISSING = re.compile(
    r"(?P<path>\S+) does not appear to have a file named (?P<file>[\w./-]+)"
    r"|Repository Not Found for url: (?P<url>\S+)"
    r"|Incorrect path_or_model_id: '(?P<id>[^']*)'"
    r"|(?P<name>\S+) is not a local folder and is not a valid model identifier"
    r"|Can't load the configuration of '(?P<conf>[^']*)'")
_DEAD = re.compile(r"scheduler is dead|Scheduler hit an exception|Received sigquit from a "
                   r"child process")
_STARTED = re.compile(r"The server is fired up and ready to roll|Uvicorn running on")
# a launch command quoted with the log: `python -m sglang.launch_server ...`, `sglang serve ...`
_COMMAND = re.compile(r"(?:sglang\.launch_server|sglang serve)\b(.*)")
_COMMAND_FLAGS = {"--mem-fraction-static": "mem_fraction_static", "--mem-frac":
                  "mem_fraction_static", "--cuda-graph-max-bs": "cuda_graph_max_bs",
                  "--tp": "tp_size", "--tp-size": "tp_size", "--tensor-parallel-size": "tp_size",
                  "--dp": "dp_size", "--dp-size": "dp_size", "--context-length":
                  "context_length", "--chunked-prefill-size": "chunked_prefill_size",
                  "--max-running-requests": "max_running_requests", "--model-path": "model_path"}


def command_flags(text: str) -> dict:
    """The flags of a launch command quoted with the log (lines continued with "\\" joined),
    under ServerArgs names; numbers as numbers."""
    joined = re.sub(r"\\\s*\n", " ", text)
    out: dict = {}
    for m in _COMMAND.finditer(joined):
        words = m.group(1).replace("=", " ").split()
        for flag, value in zip(words, words[1:]):
            name = _COMMAND_FLAGS.get(flag)
            if name is None or value.startswith("--"):
                continue
            value = value.strip("'\"")
            try:
                out.setdefault(name, float(value) if "." in value else int(value))
            except ValueError:
                out.setdefault(name, value)
    return out


def read_failure(text: str) -> Failure | None:
    """The first failure the log shows before the server came up (None: none shown)."""
    m = _STARTED.search(text)
    if m:
        text = text[:m.start()]
    found: list[tuple[int, Failure]] = []
    m = _CONTEXT.search(text)
    if m and not m.group(1):
        found.append((m.start(), Failure("max_model_len_over_context", clip_words(m.group(0)), {
            "context_length": int(m.group(2)), "context": int(m.group(3))})))
    m = _UNBALANCED.search(text)
    if m:
        figures = {}
        if m.group(1):
            figures = {"min_free_gb": float(m.group(1)), "local_free_gb": float(m.group(2))}
        found.append((m.start(), Failure("free_memory", clip_words(m.group(0)), figures)))
    for rx in (_LEAVE_NONE, _NOT_ENOUGH):
        m = rx.search(text)
        if m:
            figures = {"mem_fraction_static": m.group(1)} if m.group(1) else {}
            if rx is _LEAVE_NONE and m.group(2):
                figures.update(floor_printed=m.group(2), minimum_viable=m.group(3))
            found.append((m.start(), Failure("no_kv_memory", clip_words(m.group(0)), figures)))
            break
    m = _HYBRID.search(text)
    if m:
        found.append((m.start(), Failure("no_kv_memory", m.group(0), {"state_slots": True})))
    capture = _CAPTURE.search(text)
    oom = torch_oom(text)
    if capture:
        rest = text[capture.end():capture.end() + 600]
        inner = torch_oom(rest)
        if inner:
            words = clip_words(text[capture.start():capture.end() + inner[1]], 400)
        else:
            words = clip_words(text[capture.start():capture.end() + 200].split("\n")[0])
        found.append((capture.start(), Failure(
            "oom_cuda_graphs" if inner else "unknown", words,
            inner[2] if inner else {"step": "cuda_graphs"})))
    elif oom:
        start, end, figures = oom
        line = text.rfind("\n", 0, start) + 1
        found.append((start, Failure(last_step(text[:start], _STEPS),
                                     clip_words(text[line:end], 500),
                                     figures)))
    m = _MISSING.search(text)
    if m:
        found.append((m.start(), missing_model(m, ("path", "id", "name", "url", "conf"))))
    if found:
        return min(found, key=lambda f: f[0])[1]
    m = _DEAD.search(text)
    return Failure("unknown", m.group(0)) if m else None


def _fraction_floor(log, f: Failure) -> dict:
    """From the log's free memory before and after the weights, the fraction below which
    SGLang's pool is empty: rest = after - before x (1 - F) > 0 needs F > 1 - after/before."""
    g = log.figures
    after = g.get("avail_mem_after_weights_gb")
    before = g.get("avail_mem_start_gb")
    if before is None and after is not None and g.get("weights_mem_gb") is not None:
        before = round(after + g["weights_mem_gb"], 2)  # "mem usage" is before - after
    if not after or not before:
        return {}
    floor = 1 - after / before
    suggest = math.ceil((floor + 0.01) * 100) / 100
    out = {"free_before_weights_gb": before, "free_after_weights_gb": after,
           "mem_fraction_static_floor": round(floor, 4)}
    if suggest < 1:
        out.update(mem_fraction_static=suggest,
                   headroom_gb=round(before * (1 - suggest), 2))
    return out


def _setting(log, name):
    value = log.server_args.get(name)
    return log.command.get(name) if value is None else value


def diagnose(log) -> Diagnosis | None:
    """The cause and the fix for the failure `log` (a kvcalc.serving.sglang.log.SglangLog)
    records, None when it records none."""
    f = log.failure
    if f is None:
        return None
    fig, counted = dict(f.figures), {}
    mfs = fig.get("mem_fraction_static") or _setting(log, "mem_fraction_static")
    tp = _setting(log, "tp_size")
    more = f"--tp-size {int(tp) * 2}" if tp else "a larger --tp-size"
    if f.kind == "max_model_len_over_context":
        want, ctx = fig["context_length"], fig["context"]
        cause = (f"--context-length {want:,} is longer than the model's context of {ctx:,} "
                 "tokens (derived from its config.json); SGLang refuses it before loading")
        fix = (f"serve at --context-length {ctx} or less (or leave it unset); only if the model "
               f"was trained or rope-scaled past {ctx:,} tokens, set "
               "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1: positions beyond its context "
               "give wrong output")
        counted["context_length"] = ctx
    elif f.kind == "free_memory":
        if "min_free_gb" in fig:
            low, here = fig["min_free_gb"], fig["local_free_gb"]
            cause = (f"another process holds GPU memory: the GPU with the least free had "
                     f"{low:.2f} GB free at start-up, this one {here:.2f} GB (SGLang refuses "
                     f"below 0.9 x, since every rank's pool is cut to the least free)")
            counted["held_gb"] = round(here - low, 2)
        else:
            cause = ("another process holds memory on some of the GPUs: SGLang compares the "
                     "free memory of every rank at start-up and refuses when the least is "
                     "under 0.9 x the most, since every rank's pool is cut to the least")
        fix = ("stop the other process (`nvidia-smi` lists it: often an earlier server still "
               "running) or pick free GPUs (CUDA_VISIBLE_DEVICES); the check's switch, "
               "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK=1 in the 0.5.4 source "
               "(SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0 in later builds), only turns the "
               "refusal into a warning: the pool stays sized from the least free GPU")
    elif f.kind == "no_kv_memory" and fig.get("state_slots"):
        cause = ("nothing is left for the hybrid model's state slots (Mamba / linear "
                 "attention) after the weights under --mem-fraction-static")
        fix = ("raise --mem-fraction-static, lower --max-mamba-cache-size or "
               "--max-running-requests, or spread the weights (--tp-size)")
    elif f.kind == "no_kv_memory":
        counted = _fraction_floor(log, f)
        if "minimum_viable" in fig:
            counted.setdefault("mem_fraction_static_floor", float(fig["minimum_viable"]))
        now = f" {mfs}" if mfs is not None else ""
        cause = (f"the weights leave no memory for the KV pool: SGLang keeps "
                 f"--mem-fraction-static{now} of the memory free at start-up for weights and "
                 "pool together, and the weights alone took more")
        floor = counted.get("mem_fraction_static_floor")
        if floor is not None:
            w = counted.get("free_before_weights_gb")
            cause += (f" (the pool is positive only above {floor:.3f}"
                      + (f": 1 - {counted['free_after_weights_gb']:.2f} / {w:.2f} GB free "
                         "after / before loading" if w else "") + ")")
        if "mem_fraction_static" in counted and counted["mem_fraction_static"] <= 0.95:
            fix = (f"raise --mem-fraction-static to {counted['mem_fraction_static']:.2f} or "
                   "more (higher, not lower: it is the share for weights and KV cache)"
                   + (f"; that leaves {counted['headroom_gb']:.2f} GB for activations and "
                      "CUDA graphs" if "headroom_gb" in counted else "")
                   + f"; if that is too little, spread the weights ({more}) or serve a "
                   "quantized checkpoint")
        else:
            fix = (f"spread the weights over more GPUs ({more}) or serve a "
                   "quantized checkpoint: raising --mem-fraction-static far enough would "
                   "leave no room for activations and CUDA graphs")
    elif f.kind == "oom_cuda_graphs":
        bs = _setting(log, "cuda_graph_max_bs")
        lack = (fig.get("tried_bytes", 0) - fig.get("free_bytes", 0)
                if "tried_bytes" in fig and "free_bytes" in fig else None)
        cause = ("out of memory capturing CUDA graphs: SGLang captures them after sizing the "
                 "KV pool, in the memory --mem-fraction-static leaves out"
                 + (f" (the failed allocation lacked {gib_text(lack)})" if lack else ""))
        parts = []
        if mfs is not None:
            lower = max(round(float(mfs) - 0.05, 2), 0.5)
            parts.append(f"--mem-fraction-static {lower:.2f} (from {mfs})")
            counted["mem_fraction_static"] = lower
        else:
            parts.append("a smaller --mem-fraction-static (SGLang suggests 0.8 or 0.7)")
        if bs:
            parts.append(f"--cuda-graph-max-bs {max(int(bs) // 2, 1)} (from {bs})")
            counted["cuda_graph_max_bs"] = max(int(bs) // 2, 1)
        else:
            parts.append("a smaller --cuda-graph-max-bs (SGLang suggests 16)")
        fix = (" or ".join(parts) + ": each leaves the capture more room; "
               "--disable-cuda-graph as a last resort (slower decoding)")
    elif f.kind == "oom_loading":
        start = log.figures.get("avail_mem_start_gb")
        cause = ("out of memory loading the weights: they do not fit in the "
                 + (f"{start:.2f} GB free at start-up" if start else "GPU's free memory"))
        fix = (f"spread them over more GPUs ({more}), serve a quantized "
               "checkpoint, or free the GPU of other processes")
        if log.transformers_backend:
            cause += ("; SGLang fell back to its Transformers backend (this release has no "
                      "native implementation of the architecture), which builds the model "
                      "through transformers rather than SGLang's own sharded layers")
            fix = ("use an SGLang release that implements the architecture natively; " + fix)
    elif f.kind in ("oom_kv_cache", "oom"):
        cause = ("CUDA out of memory " + ("allocating the KV pool" if f.kind == "oom_kv_cache"
                                          else "at a step the lines given do not show"))
        fix = ("lower --mem-fraction-static (more headroom), --cuda-graph-max-bs and "
               "--chunked-prefill-size, or free the GPU of other processes")
    elif f.kind == "missing_model":
        name = fig.get("model") or _setting(log, "model_path") or "the model"
        what = f" ({fig['file']} is missing)" if fig.get("file") else ""
        cause = (f"SGLang found no model files at {name}{what}: a wrong id or path, or no "
                 "access")
        fix = ("check --model-path: a Hub id (org/name, as the model's page spells it) or a "
               "local folder with config.json and the weights; download it first (`hf "
               "download NAME`); for a gated repository accept its licence and set HF_TOKEN")
    elif fig.get("step") == "cuda_graphs":
        cause = ("capturing CUDA graphs failed, not for want of memory: the error is the "
                 "one SGLang quotes after 'Capture cuda graph failed'")
        fix = ("--disable-cuda-graph starts without them (slower decoding), or drop "
               "--enable-torch-compile if set; the error itself is SGLang's (or a kernel's): "
               "report it with the log")
    else:
        cause = "SGLang stopped, but the lines given do not say why"
        fix = ("paste the log from the first rank's 'Scheduler hit an exception' traceback to "
               "its last line: the cause is printed there")
    return Diagnosis(engine="sglang", kind=f.kind, cause=cause, fix=fix, words=f.words,
                     figures=fig, counted=counted)
