"""The `vllm serve` line plan prints: a layout's flags, only those vLLM 0.32's parser
takes (tests/test_plan_vllm.py runs that parser on them), and the features it was counted
with. Pure: no I/O."""

from __future__ import annotations

import shlex

__all__ = ["serve_command", "serve_words"]


def serve_command(model: str, layout, features: dict | None = None) -> str:
    """The `vllm serve` line for `layout` (a kvcalc.plan.Layout): only flags vLLM 0.32's parser takes, then the
    features it was counted with (`features`: EngineSettings' speculative_config and LoRA
    fields, spelled as vLLM's parser takes them)."""
    parts = serve_words(model, tp=layout.tp, pp=layout.pp, replicas=layout.replicas,
                        expert_parallel=layout.expert_parallel,
                        max_model_len=layout.max_model_len,
                        gpu_memory_utilization=layout.gpu_memory_utilization,
                        max_num_seqs=layout.max_num_seqs,
                        max_num_batched_tokens=(layout.max_num_batched_tokens
                                                if layout.batched_tokens_given else None),
                        kv_dtype=layout.kv_dtype)
    f = features or {}
    if f.get("speculative_config") is not None:
        parts += ["--speculative-config", shlex.quote(f["speculative_config"])]
    if f.get("enable_lora"):
        parts.append("--enable-lora")
        for name in ("max_loras", "max_lora_rank", "lora_dtype"):
            if f.get(name) is not None:
                parts += ["--" + name.replace("_", "-"), str(f[name])]
        if f.get("lora_target_modules") is not None:  # nargs="+": one word a module
            parts += ["--lora-target-modules",
                      *f["lora_target_modules"].replace(",", " ").split()]
    for name in ("limit_mm_per_prompt", "mm_encoder_tp_mode"):
        if f.get(name) is not None:
            parts += ["--" + name.replace("_", "-"), shlex.quote(f[name])]
    return " ".join(parts)


def serve_words(model: str, *, tp: int, pp: int, replicas: int, max_model_len: int,
                gpu_memory_utilization: str, max_num_seqs: int,
                max_num_batched_tokens: int | None, kv_dtype: str,
                expert_parallel: bool = False) -> list[str]:
    """A `vllm serve` line's layout and memory flags, as words (serve_command's, and each
    side's of a disaggregated split, kvcalc.plan.disagg_launch): the batched-token budget
    where given (None: vLLM's own), the KV dtype where not auto."""
    parts = ["vllm", "serve", shlex.quote(model), "--tensor-parallel-size", str(tp),
             "--pipeline-parallel-size", str(pp)]
    if replicas > 1:
        parts += ["--data-parallel-size", str(replicas)]
    if expert_parallel:
        parts += ["--enable-expert-parallel"]
    parts += ["--max-model-len", str(max_model_len),
              "--gpu-memory-utilization", gpu_memory_utilization,
              "--max-num-seqs", str(max_num_seqs)]
    if max_num_batched_tokens is not None:
        parts += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    if kv_dtype != "auto":
        parts += ["--kv-cache-dtype", kv_dtype]
    return parts
