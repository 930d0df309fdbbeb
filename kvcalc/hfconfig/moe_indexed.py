"""Mixture-of-experts decoders whose attention a lightning indexer makes sparse, over GQA
(MiniMax-M3's language model, minimax_m3_vl_text), mixed with sliding-window MLA
(dots.llm3's, dots3_note_text) or over gated MLA with hyper-connections (HY V4, hy_v4);
DeepSeek-V3.2's and GLM-5's are in moe_2026.

Read as their configuration classes and decoder layers in transformers 5.24 read them
(`configuration_minimax_m3_vl.py`, `configuration_dots3_note.py`, `configuration_hy_v4.py`
and their modeling files).
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, latent_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.hyper_connections import HyperConnections
from kvcalc.layers import Attention, Dense, Latent, Layer, MoE
from kvcalc.layers_indexed import IndexedAttention, IndexedLatent
from kvcalc.layers_latent import SlidingLatent

# MiniMaxM3VLTextConfig: the original checkpoint's sparse_attention_config keys, and the
# flat fields the class reads them into (those win when both are given).
_SPARSE_KEYS = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
                "index_block_size": "sparse_block_size",
                "index_topk_blocks": "sparse_topk_blocks",
                "index_local_blocks": "sparse_local_block"}


def _sparse_config(c: Config) -> Config:
    value = c.raw("sparse_attention_config")
    if value is MISSING or value is None:
        return Config({}, c.model_type, c.where)
    if not isinstance(value, dict):
        raise c.error(f"field 'sparse_attention_config' must be an object, got "
                      f"{describe(value)}")
    return Config(value, c.model_type, f"{c.where}: sparse_attention_config")


def _flags(c: Config, key: str, layers: int) -> list[bool] | None:
    """A per-layer list of 0/1 flags (sparse_attention_freq, moe_layer_freq), or None."""
    value = c.raw(key)
    if value is MISSING or value is None:
        return None
    if not isinstance(value, list) or len(value) != layers:
        raise c.error(f"field {key!r} must list {layers} entries, got {describe(value)}")
    return [bool(v) for v in value]


def minimax_m3_text(c: Config) -> dict:
    """MiniMax-M3's language model: GQA with per-head q/k RMSNorms, a lightning indexer
    and its key cache on the "minimax_m3_sparse" layers (block-sparse attention), routed
    experts of intermediate_size beside one shared MLP, dense layers of
    dense_intermediate_size where mlp_layer_types says."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    sparse_cfg = _sparse_config(c)
    index = {}
    for key, legacy in _SPARSE_KEYS.items():
        value = sparse_cfg.opt_int(legacy, None)
        index[key] = value if value is not None else c.req_dim(key)

    def older() -> list[str]:
        freq = _flags(sparse_cfg, "sparse_attention_freq", layers)
        return ["sparse" if f else "full" for f in (freq or [False] * layers)]

    kinds = layer_kinds(c, layers, {"full_attention": "full", "minimax_m3_sparse": "sparse"},
                        older)
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        freq = _flags(c, "moe_layer_freq", layers)
        sparse_mlp = freq if freq is not None else [True] * layers
    elif (not isinstance(types, list) or len(types) != layers
          or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    else:
        sparse_mlp = [t == "sparse" for t in types]
    moe = MoE(experts=c.req_int("num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"), expert_d_ff=d_ff, shared_experts=1,
              shared_d_ff=c.req_dim("shared_intermediate_size"))
    dense = Dense(c.req_dim("dense_intermediate_size"))
    geometry = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, qk_norm=2 * head_dim)
    full = Attention(**geometry)
    indexed = IndexedAttention(**geometry, index_heads=index["index_n_heads"],
                               index_head_dim=index["index_head_dim"],
                               index_block_size=index["index_block_size"],
                               index_topk_blocks=index["index_topk_blocks"],
                               index_local_blocks=index["index_local_blocks"])
    layer_list = [Layer(indexed if k == "sparse" else full, moe if s else dense, 2)
                  for k, s in zip(kinds, sparse_mlp)]
    notes = []
    if "sparse" in kinds:
        notes.append(f"sparse layers also cache the indexer's key, {index['index_head_dim']} "
                     "bf16 elements per token")
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 524288) or 0,
                         notes=notes)
    return with_runs(fields, layer_list)


# Dots3NoteTextConfig: the released checkpoint's sliding-layer fields (swa_*), and the
# class's values when neither they nor per_layer_config are given.
_DOTS3_SWA = {"num_attention_heads": 64, "q_lora_rank": 1024, "kv_lora_rank": 1024,
              "head_dim": 256, "qk_nope_head_dim": 192, "v_head_dim": 128}


def _dots3_layer_config(c: Config, i: int, kind: str) -> Config:
    """Layer i's attention fields: the model's, under per_layer_config's entry for i (a
    saved config keeps only what differs), or for a sliding layer of a config without it,
    the swa_* fields and their class defaults."""
    per_layer = c.raw("per_layer_config")
    if per_layer not in (MISSING, None):
        if not isinstance(per_layer, dict):
            raise c.error(f"field 'per_layer_config' must be an object, got {describe(per_layer)}")
        # keys are layer indices, saved as strings (zero-padded: "02")
        by_index = {int(k): v for k, v in per_layer.items()
                    if isinstance(k, int) or (isinstance(k, str) and k.isdigit())}
        own = by_index.get(i) or {}
        if not isinstance(own, dict):
            raise c.error(f"per_layer_config[{i}] must be an object, got {describe(own)}")
        return Config({**c.cfg, **own}, c.model_type, c.where)
    if kind != "sliding":
        return c
    swa = {key: c.cfg.get(f"swa_{key}", default) for key, default in _DOTS3_SWA.items()}
    swa["qk_rope_head_dim"] = c.cfg.get("swa_qk_rope_head_dim",
                                        swa["head_dim"] - swa["qk_nope_head_dim"])
    return Config({**c.cfg, **swa}, c.model_type, c.where)


def _dots3_kinds(c: Config, layers: int) -> list[str]:
    """Dots3NoteTextConfig's layer kinds: layer_types (a legacy "full_attention" is DSA
    unless use_dsa is false), else DSA on the first two layers and every fourth from
    layer 1, sliding elsewhere (all DSA without use_sliding_window)."""
    use_dsa = c.opt_bool("use_dsa", True) if c.raw("per_layer_config") in (MISSING, None) \
        else c.raw("use_dsa")
    sliding = c.opt_bool("use_sliding_window", True)
    full = "full" if use_dsa is False else "indexed"
    kinds = layer_kinds(c, layers, {"full_attention": "full", "indexed_attention": "indexed",
                                    "sliding_attention": "sliding"},
                        lambda: [full if not sliding or i < 2 or i % 4 == 1 else "sliding"
                                 for i in range(layers)])
    if use_dsa is True:
        kinds = ["indexed" if k == "full" else k for k in kinds]
    elif use_dsa is False:
        kinds = ["full" if k == "indexed" else k for k in kinds]
    return kinds


def dots3_note_text(c: Config) -> dict:
    """dots.llm3 (Dots 3 Note) language model: MLA with q LoRA, a RoPE-key norm and a
    per-head output gate; DeepSeek Sparse Attention's indexer on "indexed_attention"
    layers, sliding-window MLA of its own geometry (per_layer_config) on the others;
    dense first layer(s), then routed experts beside shared ones fused into one MLP."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kinds = _dots3_kinds(c, layers)
    window = c.opt_int("sliding_window", None) or c.opt_int("sliding_window_size", 512) or 512
    bias = c.opt_bool("attention_bias", False)

    def mixer(i: int, kind: str):
        lc = _dots3_layer_config(c, i, kind)
        geometry = dict(heads=lc.req_dim("num_attention_heads"),
                        kv_lora_rank=lc.req_dim("kv_lora_rank"),
                        rope_dim=lc.req_dim("qk_rope_head_dim"),
                        nope_dim=lc.req_dim("qk_nope_head_dim"), v_dim=lc.req_dim("v_head_dim"),
                        q_lora_rank=lc.req_dim("q_lora_rank"), bias=bias, head_gate=True,
                        rope_norm=True)
        if kind == "sliding":
            return SlidingLatent(**geometry, window=window)
        if kind == "indexed":
            return IndexedLatent(**geometry, index_heads=c.req_dim("index_n_heads"),
                                 index_head_dim=c.req_dim("index_head_dim"),
                                 index_topk=c.req_dim("index_topk"))
        return Latent(**geometry)

    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        first = c.opt_int("first_k_dense_replace", 1) or 0
        freq = c.raw("moe_layer_freq")
        if isinstance(freq, list):
            types = ["sparse" if i >= first and freq[i] else "dense" for i in range(layers)]
        else:
            every = c.opt_int("moe_layer_freq", 1) or 1
            types = ["sparse" if i >= first and i % every == 0 else "dense"
                     for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    shared = c.opt_int("n_shared_experts", 1) or 0
    # the checkpoint's moe_shared_expert_intermediate_size wins, as the class reads it
    shared_d_ff = c.opt_int("moe_shared_expert_intermediate_size", None) or c.req_dim(
        "shared_experts_intermediate_size")
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1 if shared else 0,
              shared_d_ff=shared_d_ff * shared)
    dense = Dense(d_ff)
    mixers = [mixer(i, k) for i, k in enumerate(kinds)]
    main = mixer(-1, "full")
    layer_list = [Layer(m, moe if t == "sparse" else dense, 2) for m, t in zip(mixers, types)]
    fields = latent_fields(c, main, hidden, layers, d_ff, vocab, bias, 524288,
                           notes=["MLA: the cache holds kv_lora_rank + qk_rope_head_dim "
                                  "elements per token per layer (the sliding layers' own "
                                  "ranks), indexed layers also the indexer's key"])
    return with_runs(fields, layer_list)


def _hy_indexer_types(c: Config, layers: int) -> list[str]:
    """HYV4Config's per-layer indexer mode: `indexer_types`, else the first layer and every
    fourth from layer 1 run their own indexer ("full"), the others reuse the last full
    layer's choice ("shared") and have none."""
    types = c.raw("indexer_types")
    if types is MISSING or types is None:
        return ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("full", "shared") for t in types)):
        raise c.error(f"field 'indexer_types' must list {layers} entries, each \"full\" or "
                      f"\"shared\", got {describe(types)}")
    return types


def hy_v4(c: Config) -> dict:
    """HY V4 (Hy4): DeepSeek-V3.2's MLA with q LoRA, a sigmoid output gate per element
    (gate_proj) and a learned sink per head; the lightning indexer and its key cache on
    the "full" indexer_types layers (the "shared" ones reuse its choice); one dense layer,
    then routed + shared experts (mlp_layer_types); hc_mult residual streams mixed by
    hyper-connections around every block."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    # HYV4Attention builds the same attention whatever layer_types says (it names the mask)
    geometry = dict(heads=heads, kv_lora_rank=c.req_dim("kv_lora_rank"),
                    rope_dim=c.req_dim("qk_rope_head_dim"),
                    nope_dim=c.req_dim("qk_nope_head_dim"), v_dim=c.req_dim("v_head_dim"),
                    q_lora_rank=c.req_dim("q_lora_rank"), bias=bias, value_gate=True,
                    sinks=True)
    indexed = IndexedLatent(**geometry, index_heads=c.req_dim("index_n_heads"),
                            index_head_dim=c.req_dim("index_head_dim"),
                            index_topk=c.req_dim("index_topk"))
    shared = Latent(**geometry)
    expert_ff = c.req_dim("moe_intermediate_size")
    n_shared = c.opt_int("n_shared_experts", 0) or 0
    # HYV4Config's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_dim("n_routed_experts", "num_local_experts"),
              active=c.req_dim("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1 if n_shared else 0, shared_d_ff=expert_ff * n_shared)
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:  # HYV4Config: one dense layer, experts after
        types = ["dense"] * min(1, layers) + ["sparse"] * (layers - 1)
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    mixers = [indexed if t == "full" else shared for t in _hy_indexer_types(c, layers)]
    layer_list = [Layer(m, moe if t == "sparse" else Dense(d_ff), 2)
                  for m, t in zip(mixers, types)]
    notes = [f"MLA: the cache holds kv_lora_rank + qk_rope_head_dim = "
             f"{indexed.kv_lora_rank + indexed.rope_dim} elements per token per layer, and "
             f"on the layers with their own indexer its key, {indexed.index_token_bytes()} B "
             f"(fp8 and its scales)"]
    if c.model_type == "hy_v4_vl_text":
        notes.append("vLLM 0.32 has no HY V4 VL model (only HYV4ForCausalLM): its language "
                     "model is paged as HY V4's")
    fields = latent_fields(c, indexed, hidden, layers, d_ff, vocab, bias, 262144, notes=notes,
                           hyper_connections=HyperConnections(c.req_dim("hc_mult")))
    return with_runs(fields, layer_list)
