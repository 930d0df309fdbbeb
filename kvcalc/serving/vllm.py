"""vLLM's wing at the seam: its count (kvcalc.capacity, release by release) as a
ServingCount, so that engines can be set side by side under one record.

The arithmetic is kvcalc.capacity's, unchanged: this module only names it.
"""

from __future__ import annotations

from kvcalc._record import record
from kvcalc.serving.layout import Layout
from kvcalc.serving.record import ServingCount

__all__ = ["VllmFlags", "check_release", "count", "release_settings"]


def check_release(text: str) -> None:
    from kvcalc.capacity.engine import parse_version

    parse_version(text)


def release_settings(release: str) -> dict:
    """EngineSettings' fields that name a release: the version, and the engine it runs by
    default (V1 became vLLM's default in 0.8; earlier releases ran V0)."""
    from kvcalc.capacity.engine import parse_version

    return {"vllm_version": release,
            "engine": "v0" if parse_version(release) < (8, 0) else "v1"}


@record
class VllmFlags:
    engine: object  # kvcalc.serving.EngineRef
    settings: object  # kvcalc.capacity.engine.EngineSettings
    kv_scale_bytes: int = 0


def count(spec, hw, flags: VllmFlags) -> ServingCount:
    from kvcalc.capacity.verdict import engine_verdict

    s = flags.settings
    v = engine_verdict(spec, hw, s, kv_scale_bytes=flags.kv_scale_bytes)
    cap = v.capacity
    per_token = sum(p.layers * p.group.token_bytes for p in cap.groups)
    num, den = s.utilization
    return ServingCount(
        engine=flags.engine, hardware=hw.name, layout=Layout(tp=s.tp, pp=s.pp),
        context_len=s.max_model_len, page_size=cap.block_size or 0,
        bytes_per_token=per_token, kv_cache_tokens=cap.kv_cache_tokens,
        max_running_requests=cap.max_num_seqs, max_concurrency=cap.max_concurrency,
        terms=tuple(cap.memory.items()),
        flags=(("gpu_memory_utilization", f"{num / den:g}"),
               ("max_model_len", s.max_model_len),
               ("max_num_batched_tokens", cap.max_num_batched_tokens),
               ("max_num_seqs", cap.max_num_seqs), ("block_size", cap.block_size),
               ("kv_cache_dtype", s.kv_dtype), ("tensor_parallel_size", s.tp),
               ("pipeline_parallel_size", s.pp)),
        starts=v.starts, refusal=v.room.refusal if not v.starts else "",
        pools=(("num_gpu_blocks", cap.num_gpu_blocks or 0),), notes=cap.notes)
