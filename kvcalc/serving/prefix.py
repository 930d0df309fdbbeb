"""Prefix caching as each engine runs it: whether it is on (each engine's own switch and
default) and the unit a cached prefix comes in, for the served-load model
(kvcalc.served: `Load.prefix_block`, `Load.prefix_caching`).

* vLLM: on by default in V1 (`--enable-prefix-caching` / `--no-enable-prefix-caching`;
  a hybrid state model by its release's default, kvcalc.serving.vllm.rules
  `hybrid_prefix_caching`; V0, before 0.8, off by default); a hit is whole blocks of
  `--block-size` (16), at most the prompt less one token (0.33 `v1/core/
  kv_cache_manager.py` `KVCacheManager.get_computed_blocks`: "set max_cache_hit_length to
  prompt_length - 1", the hit found block by block).
* SGLang: the radix cache is on unless `--disable-radix-cache` (and for the hybrid
  types it runs without one, kvcalc.serving.sglang.pools NO_RADIX_STATE_TYPES); a match is
  whole pages of `--page-size` (1 by default; 0.5.4 `mem_cache/radix_cache.py`
  `RadixCache.match_prefix`: page_aligned_len = len(key) // page_size * page_size), at
  most the prompt less one token (`managers/schedule_batch.py` `Req.init_next_round_input`:
  max_prefix_len = input_len - 1).
* TensorRT-LLM: block reuse on by default (`kv_cache_config.enable_block_reuse`,
  kvcalc.serving.trtllm.rules `host_cache`); a partly matched block is reused too
  (`enable_partial_reuse`, default True in every LLM-API snapshot read), so a hit is not
  cut to whole blocks of tokens_per_block; the last prompt token is always computed.
"""

from __future__ import annotations

from kvcalc.ground.record import record

__all__ = ["PrefixCache", "prefix_cache"]


@record
class PrefixCache:
    engine: str
    on: bool
    block: int  # a cached prefix is a whole number of these tokens (1: any length)
    switch: str  # the engine's switch as given, or its default
    note: str = ""
    source: str = ""

    def as_dict(self) -> dict:
        return {"engine": self.engine, "prefix_caching": self.on, "block_tokens": self.block,
                "switch": self.switch, "note": self.note, "source": self.source}


def prefix_cache(spec, count, given: dict) -> PrefixCache:
    """Prefix caching for `spec` under `count` (a ServingCount: engine, release, page
    size) and the engine's own switch in `given` (enable_prefix_caching,
    disable_radix_cache or enable_block_reuse; None: its default)."""
    name = count.engine.name
    page = max(count.page_size, 1)
    state = spec.layers_of("state") > 0
    if name == "vllm":
        from kvcalc.serving.vllm.rules import default_engine, rules_for

        release = count.engine.release
        flag = given.get("enable_prefix_caching")
        if flag is not None:
            on, switch = bool(flag), ("--enable-prefix-caching" if flag
                                      else "--no-enable-prefix-caching")
        elif default_engine(release) == "v0":
            on, switch = False, "off by default in V0 (before 0.8)"
        elif state:
            on = rules_for(release).hybrid_prefix_caching()
            switch = f"{'on' if on else 'off'} by default for a hybrid model in {release}"
        else:
            on, switch = True, "on by default (V1)"
        return PrefixCache("vllm", on, page, switch,
                           "" if on else "vLLM's prefix caching is off: every prompt is "
                           "computed whole (--prefix-hit counts 0)",
                           "vllm v1/core/kv_cache_manager.py KVCacheManager.get_computed_blocks")
    if name == "sglang":
        from kvcalc.serving.sglang.pools import NO_RADIX_STATE_TYPES

        off = bool(given.get("disable_radix_cache"))
        model_type = spec.extra.get("hf_model_type", "")
        no_radix = state and model_type in NO_RADIX_STATE_TYPES
        on = not (off or no_radix)
        switch = ("--disable-radix-cache" if off else
                  f"off for {model_type} (SGLang runs it without a radix cache)"
                  if no_radix else "on by default (radix cache)")
        return PrefixCache("sglang", on, page, switch,
                           "" if on else "SGLang's radix cache is off: every prompt is "
                           "computed whole (--prefix-hit counts 0)",
                           "sglang mem_cache/radix_cache.py RadixCache.match_prefix")
    flag = given.get("enable_block_reuse")
    on = True if flag is None else bool(flag)
    switch = ("on by default (kv_cache_config.enable_block_reuse)" if flag is None else
              f"kv_cache_config.enable_block_reuse: {'true' if on else 'false'}")
    return PrefixCache("tensorrt-llm", on, 1, switch,
                       "" if on else "TensorRT-LLM's block reuse is off: every prompt is "
                       "computed whole (--prefix-hit counts 0)",
                       "tensorrt_llm/llmapi/llm_args.py KvCacheConfig enable_block_reuse, "
                       "enable_partial_reuse")


def split_prefix(prompt: int, hit: float, host_hit: float, block: int) -> tuple[int, int]:
    """(tokens found on the GPU, tokens fetched from the host tier) of a `prompt` whose
    first `hit` share is cached on the GPU and the next `host_hit` share on the host:
    each engine's hit is whole blocks of `block` tokens, at most the prompt less one
    token (module docstring); the host's part ends on a block too."""
    top = prompt - 1
    gpu = min(int(prompt * hit), top) // block * block
    both = min(int(prompt * (hit + host_hit)), top) // block * block
    return gpu, max(both - gpu, 0)
