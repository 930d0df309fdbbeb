"""TensorRT-LLM's bytes per token and its block rounding: pure arithmetic, the same for a
count from the settings and for a check against a logged free memory.

Facts (quoted in words; NVIDIA/TensorRT-LLM, the snapshots named in
kvcalc.serving.trtllm.rules):

* the PyTorch flow's ESTIMATE divides by `get_cache_size_per_token` (0.20.0 `_util.py`;
  1.1.0rc6 `KvCacheCreator._get_cache_size_per_token`; 1.3.0rc3 `resource_manager.py`
  `KVCacheManager.get_cache_size_per_token`, l. 752-797): for a model without MLA,
  2 (K and V) x layers on this pipeline rank x (head_dim x num_key_value_heads // tp)
  x dtype bytes, tp being 1 under attention DP; head_dim is the config's `head_dim` when
  an int, else hidden_size // num_attention_heads; a per-layer list of K/V heads is
  averaged (sum / len). The floor is of the PRODUCT, so 8 K/V heads at tp 16 count half
  a head. With MLA (`kv_lora_rank` in the config): one latent "head" of kv_lora_rank +
  qk_rope_head_dim, K only (factor 1), not divided by tp. dtype bytes: 1 for an FP8 KV
  cache, otherwise 2; NVFP4 (1.3.0rc3 l. 786-790) ceil(elements / 2) + ceil(elements /
  16). A two-model draft's own size is ADDED (`_get_kv_size_per_token`, 1.3.0rc3
  `_util.py` l. 106-118).
* the POOL holds `get_cache_bytes_per_token` (1.3.0rc3 `resource_manager.py` l. 223-260,
  799-814): each local layer keeps ceil(num_key_value_heads / tp) whole heads
  ("(n + tp - 1) // tp", tp 1 under attention DP: heads replicated when kv_heads < tp);
  MLA is built with one K/V head of kv_lora_rank + qk_rope_head_dim and
  `CacheType.SELFKONLY` (kv factor 1; `_util.py` l. 577-596); the local layers are this
  rank's (`get_pp_layers`, l. 117-144) PLUS the speculative layers (MTP, one-model
  Eagle: `get_num_spec_layers`) on the last pipeline rank, which the estimate does not
  count; the element size is the pool dtype's (fp32 4, bf16/fp16 2, fp8 1).
* built engines (C++ `calculateCacheSizePerToken`, kvCacheManager.cpp): this pipeline
  rank's attention layers x local K/V heads x 2 x head size x dtype bytes, local heads
  being `gptJsonConfig.cpp`'s max(kv_heads / tp, 1) in integer division
  (kvcalc.serving.trtllm.rules `engine_kv_heads`).
* tokens from memory: the C++ `calculateMaxNumBlocks` takes max tokens = fraction x
  free / bytes per token, the minimum with a given max_tokens_in_paged_kv_cache when a
  fraction is also given (else that cap alone), the minimum over ranks, then blocks =
  ceilDiv(max tokens, tokens_per_block): rounded UP. 1.3.0rc3's Python
  `calculate_max_num_blocks` (l. 816-864) floors instead (l. 857). The log's "(N)" is
  primary blocks x tokens_per_block (`KVCacheManager::allocatePools`).
"""

from __future__ import annotations

from kvcalc.ground.record import record
from kvcalc.errors import KvcalcError

__all__ = ["PerToken", "blocks_for", "element_bytes", "per_token", "pp_split", "tokens_for",
           "window_layers"]


def pp_split(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline rank as `Mapping.pp_layers` splits them (1.3.0rc3 mapping.py
    l. 315-329, torch.tensor_split): the first layers % pp ranks get one layer more."""
    if pp > layers:
        raise KvcalcError(f"pp={pp} exceeds the model's {layers} layers")
    return tuple(layers // pp + (1 if i < layers % pp else 0) for i in range(pp))


def element_bytes(kv_dtype: str, pool: bool) -> int:
    """Bytes of one K/V element: the estimate counts 1 for FP8 and 2 for everything else;
    the pool counts its dtype's size."""
    if kv_dtype in ("fp8", "int8"):
        return 1
    if pool and kv_dtype == "fp32":
        return 4
    return 2


@record
class PerToken:
    """One token in every cached layer of one pipeline rank, on one device."""

    estimate: int  # get_cache_size_per_token: what the PyTorch estimate divides by
    pool: int  # what the pool holds (the allocated GiB / tokens)
    layers: int  # cached layers the pool holds on this rank (speculative ones included)
    unknown: tuple[str, ...] = ()  # layer kinds whose paging is not modelled
    windowed: bool = False  # sliding or chunked layers (one window of max_seq_len unless
    # kv_cache_config.max_attention_window names several: kvcalc.serving.trtllm.windows)


class _Paged:
    """Which layer kinds TensorRT-LLM's KV cache manager pages like full attention: full
    attention and MLA; sliding and chunked windows ("window": the manager's window is
    kv_cache_config.max_attention_window's, max_seq_len by default, not the model's);
    states, cross attention and the rest: not modelled (None)."""

    def full(self):
        return "full"

    def sliding(self, window: int):
        return "window"

    def chunked(self, chunk: int):
        return "window"

    def state(self, mixer):
        return None

    def cross(self):
        return None

    def unpaged(self, mixer):
        return None


# Layer kinds kvcalc does not model TensorRT-LLM paging for (no TensorRT-LLM model keeps
# them, or they keep caches of their own): its own table, by the layer's class.
NOT_MODELLED = frozenset({
    "RWKV", "RGLRU", "MLSTM", "ZambaMamba", "LaraGatedDeltaNet", "Lfm3ShortConv",
    "MixtureOfAttention", "ConvolvedAttention", "NormalizedGatedAttention", "ByteAttention",
    "AudioAttention", "AudioCrossAttention", "ImageCrossAttention", "ConvAttention",
    "Compressor", "QSAAttention"})


def _geometry(mixer):
    """("mla", latent width) or ("heads", kv_heads, head_dim), or None when unknown."""
    from kvcalc.layers import Attention, CrossAttention, Latent

    if isinstance(mixer, Latent):
        return ("mla", mixer.kv_lora_rank + mixer.rope_dim)
    if isinstance(mixer, Attention) and not isinstance(mixer, CrossAttention):
        return ("heads", mixer.kv_heads, mixer.head_dim)
    return None


def per_token(spec, *, kv_dtype: str, tp: int, stage: int = 0, pp: int = 1,
              estimate_layers: str = "attention", spec_layers: int = 0,
              engine_heads=None) -> PerToken:
    """TensorRT-LLM's bytes per token for `spec` on one device of pipeline rank `stage`.

    `tp`: the attention tensor-parallel size (1 under attention DP). `estimate_layers`:
    "attention" (1.1+: the attention layers split over the pipeline), "hidden" (0.20.0:
    every decoder layer of the rank), "all" (~0.19: every layer, no split). `spec_layers`:
    MTP / one-model Eagle layers the pool adds on the last rank. `engine_heads`: for
    built engines, the rule turning (kv_heads, tp) into local heads."""
    from kvcalc.serving.layout import groups_on_stage
    from kvcalc.formulas.cache import cache_groups

    sizes = pp_split(spec.layers, pp)
    groups = cache_groups(spec, "bf16", 1)
    on_stage = groups_on_stage(groups, spec.layers, sizes[stage], stage, sizes)
    unknown, windowed, cached = set(), False, []
    for g, here in zip(groups, on_stage):
        kind = (None if type(g.mixer).__name__ in NOT_MODELLED
                else g.mixer.kv_cache_spec(_Paged()))
        geo = _geometry(g.mixer) if kind is not None else None
        if geo is None:
            if g.token_bytes:
                unknown.add(g.label)
            elif g.state_bytes:  # TensorRT-LLM keeps states in a manager of its own
                unknown.add(f"{g.label} state")
            continue
        windowed = windowed or kind == "window"
        cached.append((geo, g.layers, here.layers))
    if not cached:
        return PerToken(0, 0, 0, tuple(sorted(unknown)), windowed)
    last = stage == pp - 1
    pool_elems = 0
    local_layers = sum(h for _, _, h in cached)
    for geo, _, here in cached:
        n = here + (spec_layers if last and geo is cached[0][0] else 0)
        if geo[0] == "mla":
            pool_elems += n * geo[1]
        else:
            heads = (engine_heads(geo[1], tp) if engine_heads is not None
                     else -(-geo[1] // tp))
            pool_elems += n * 2 * heads * geo[2]
    layers = local_layers + (spec_layers if last else 0)
    pool = pool_elems * element_bytes(kv_dtype, pool=True)
    # The estimate: one config-wide width (the first cached kind's), K/V heads averaged.
    first = cached[0][0]
    all_cached = sum(n for _, n, _ in cached)
    if estimate_layers == "all":
        est_n = spec.layers
    elif estimate_layers == "hidden":
        est_n = sizes[stage]
    else:
        est_n = pp_split(max(all_cached, pp), pp)[stage]
    est_n = max(est_n, 1)
    if first[0] == "mla":
        width, factor = first[1], 1
    else:
        heads_num = sum(g[1] * n for g, n, _ in cached if g[0] == "heads")
        heads_den = sum(n for g, n, _ in cached if g[0] == "heads")
        width, factor = first[2] * heads_num // (heads_den * tp), 2
    estimate = factor * est_n * width * element_bytes(kv_dtype, pool=False)
    return PerToken(estimate, pool, layers, tuple(sorted(unknown)), windowed)


def tokens_for(memory: int, fraction: tuple[int, int], bytes_per_token: int) -> int:
    """floor(fraction x memory / bytes per token): the tokens `memory` bytes hold."""
    if bytes_per_token <= 0:
        raise KvcalcError("a KV cache with no bytes per token holds no tokens")
    num, den = fraction
    return max(memory, 0) * num // (den * bytes_per_token)


def blocks_for(tokens: int, tokens_per_block: int, rounding: str) -> int:
    """Blocks of `tokens_per_block` for `tokens`: "ceil" (C++ ceilDiv) or "floor"."""
    if rounding == "ceil":
        return -(-tokens // tokens_per_block)
    return tokens // tokens_per_block


def window_layers(spec, *, kv_dtype: str, tp: int, windows: tuple[int, ...], stage: int = 0,
                  pp: int = 1, engine_heads=None) -> dict[int, tuple[int, int]]:
    """{window: (layers, bytes per token)} of pipeline rank `stage`'s cached layers, each
    layer's window the `windows` list cycled over the rank's layers (1.3.0rc3
    `resource_manager.py::KVCacheManager._get_window_size_to_layers` l. 1037-1070, "a
    repeating pattern" over local layer indices; the C++
    `BaseKVCacheManager::groupLayersByWindowSize` alike), the bytes those layers keep
    per token as the C++ `calculateCacheSizePerTokenForSingleWindowSize` sums them
    (layers x local K/V heads x 2 x head size, or one latent head for MLA, x the pool's
    element size). Layers whose paging is not modelled are left out."""
    sizes = pp_split(spec.layers, pp)
    start = sum(sizes[:stage])
    elem = element_bytes(kv_dtype, pool=True)
    out: dict[int, list[int]] = {}
    i = 0
    for layer in spec.layer_list()[start:start + sizes[stage]]:
        mixer = layer.mixer
        if type(mixer).__name__ in NOT_MODELLED or mixer.kv_cache_spec(_Paged()) is None:
            continue
        geo = _geometry(mixer)
        if geo is None:
            continue
        if geo[0] == "mla":
            per = geo[1] * elem
        else:
            heads = engine_heads(geo[1], tp) if engine_heads is not None else -(-geo[1] // tp)
            per = 2 * heads * geo[2] * elem
        w = windows[i % len(windows)]
        layers, total = out.get(w, [0, 0])
        out[w] = [layers + 1, total + per]
        i += 1
    return {w: (n, b) for w, (n, b) in sorted(out.items())}
