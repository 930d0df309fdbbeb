"""An SGLang start-up log read into a record: the flags its server_args echo states, every
memory line, the pool's tokens and the scheduler's limits, and why it stopped if it did.
Pure text to a record; `flags_from_log` turns what the log states into SglangFlags.

The lines (format strings in `model_executor/model_runner.py`, `mem_cache/memory_pool.py`
and `managers/scheduler.py` of the releases read; "GB" is 2^30 bytes in all of them):
"server_args=ServerArgs(...)", "Init torch distributed ends. mem usage=X GB",
"Load weight begin. avail mem=X GB", "Load weight end. ... avail mem=X GB, mem usage=Y GB.",
"KV Cache is allocated. #tokens: N, K size: A GB, V size: B GB" (MLA: "KV size: A GB";
before 0.4.6 without "#tokens"), "Use [Ss]liding window memory pool. full_layer_tokens=F,
swa_layer_tokens=S", "Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size:
X GB, ssm_state size: Y GB", "Memory pool end. avail mem=X GB", and the scheduler's
"max_total_num_tokens=N, chunked_prefill_size=C, max_prefill_tokens=P,
max_running_requests=R, context_len=L[, available_gpu_mem=X GB]". Why a start-up failed
is kvcalc.serving.sglang.fail's (its messages, read in the same sources).
"""

from __future__ import annotations

import ast
import re

from dataclasses import field

from kvcalc.ground.record import record
from kvcalc.serving.failure import Failure
from kvcalc.serving.sglang.fail import command_flags, read_failure

__all__ = ["SglangLog", "is_sglang_log", "read_sglang_log"]

GiB = 1 << 30
# Each figure's pattern; the memory lines of a speculative draft worker come after the
# target's, so their second occurrence on the first rank is the draft's (draft_ names).
_PATTERNS = {
    "dist_mem_usage_gb": r"Init torch distributed ends\. mem usage=([\d.]+) ?GB",
    "avail_mem_start_gb": r"Load weight begin\. avail mem=([\d.]+) ?GB",
    "avail_mem_after_weights_gb": r"Load weight end\..*?avail mem=([\d.]+) ?GB",
    "weights_mem_gb": r"Load weight end\..*?mem usage=([\d.]+) ?GB",
    "kv_tokens": r"KV Cache is allocated\.(?: dtype: [\w.]+,)? #tokens: (\d+)",
    "k_size_gb": r"KV Cache is allocated\..*?K size: ([\d.]+) ?GB",
    "v_size_gb": r"KV Cache is allocated\..*?V size: ([\d.]+) ?GB",
    "kv_size_gb": r"KV Cache is allocated\..*?(?<![KV] )KV size: ([\d.]+) ?GB",
    "avail_mem_after_pool_gb": r"Memory pool end\. avail mem=([\d.]+) ?GB",
    "full_layer_tokens": r"[Ss]liding window memory pool\. full_layer_tokens=(\d+)",
    "swa_layer_tokens": r"swa_layer_tokens=(\d+)",
    "mamba_cache_slots": r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+)",
    "mamba_conv_state_gb": r"Mamba Cache is allocated\..*?conv_state size: ([\d.]+) ?GB",
    "mamba_ssm_state_gb": r"Mamba Cache is allocated\..*?ssm_state size: ([\d.]+) ?GB",
    "cuda_graph_mem_gb": r"Capture cuda graph end\..*?mem usage=([\d.]+) ?GB",
    "piecewise_cuda_graph_mem_gb": r"Capture piecewise CUDA graph end\..*?mem usage=([\d.]+) ?GB",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "chunked_prefill_size": r"max_total_num_tokens=\d+, chunked_prefill_size=(-?\d+)",
    "max_running_requests": r"max_running_requests=(\d+)",
    "context_len": r"max_running_requests=\d+, context_len=(\d+)",
    "available_gpu_mem_gb": r"available_gpu_mem=([\d.]+) ?GB",
    # the hierarchical cache's host pool, per rank (mem_cache/memory_pool_host.py)
    "host_memory_gb": r"Allocating ([\d.]+) GB host memory for hierarchical KV cache",
}
_DRAFTED = ("avail_mem_start_gb", "avail_mem_after_weights_gb", "weights_mem_gb", "k_size_gb",
            "v_size_gb", "kv_size_gb", "avail_mem_after_pool_gb", "kv_tokens")
@record
class SglangLog:
    server_args: dict  # the echo's keyword values, as Python literals
    figures: dict  # each pattern's value on the first rank that prints it
    ranks: int  # ranks whose memory lines appear
    failure: Failure | None = None  # why it did not start (None: it started, or the lines
    # stop before anything failed); kvcalc.serving.sglang.fail reads it
    command: dict = field(default_factory=dict)  # flags of a launch command quoted with it
    transformers_backend: bool = False  # "Using Transformers backend": no native model

    @property
    def tokens(self) -> int | None:
        return self.figures.get("max_total_num_tokens") or self.figures.get("kv_tokens")

    def gib(self, name: str) -> int | None:
        """A logged "GB" figure in bytes (to the 0.01 GiB the log prints)."""
        v = self.figures.get(name)
        return None if v is None else round(v * GiB)


# Lines only SGLang prints, a failed start-up's included (its errors, its launch command).
_MARKS = ("server_args=ServerArgs(", "max_total_num_tokens=", "KV Cache is allocated.",
          "Load weight begin. avail mem=", "Load weight end.", "sglang.launch_server",
          "sglang serve", "/sglang/srt/", "Capture cuda graph failed",
          "Please try to increase --mem-fraction-static", "The memory capacity is unbalanced",
          "Loaded weights leave no GPU memory for the KV cache",
          "derived context_length", "scheduler is dead", "Scheduler hit an exception")


def is_sglang_log(text: str) -> bool:
    return any(k in text for k in _MARKS)


def _server_args(text: str) -> dict:
    start = text.find("server_args=ServerArgs(")
    if start < 0:
        return {}
    body = text[start + len("server_args="):].split("\n", 1)[0]
    try:
        call = ast.parse(body.strip(), mode="eval").body
    except SyntaxError:
        return {}
    out = {}
    for kw in getattr(call, "keywords", []):
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            continue
    return out


def read_sglang_log(text: str) -> SglangLog:
    figures: dict = {}
    # the first rank's lines (or lines with no rank tag) speak for the start-up
    lines = [ln for ln in text.splitlines() if not re.search(r"\bTP[1-9]\d*\]", ln)
             and not re.search(r"\bDP[1-9]\d* ", ln)]
    own = "\n".join(lines)
    for name, pattern in _PATTERNS.items():
        found = [m.group(1) for m in re.finditer(pattern, own)] or [
            m.group(1) for m in re.finditer(pattern, text)]
        for key, value in zip((name, f"draft_{name}") if name in _DRAFTED else (name,), found):
            figures[key] = float(value) if "." in value else int(value)
    ranks = len(set(re.findall(r"TP(\d+)\] Load weight begin", text))) or (
        1 if "Load weight begin" in text else 0)
    failure = None if figures.get("max_total_num_tokens") else read_failure(text)
    return SglangLog(server_args=_server_args(text), figures=figures, ranks=ranks,
                     failure=failure, command=command_flags(text),
                     transformers_backend="Using Transformers backend" in text)
