"""MiniMax's models: MiniMax-Text-01 (lightning attention beside softmax attention),
MiniMax-M2, and MiniMax-M3's language model (minimax_m3_vl_text: GQA made sparse by a
lightning indexer).

Routers whose score-correction bias is a buffer (MiniMax-M2) count no bias.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, attention, core_dims, describe, flat_fields,
                                    with_runs)
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Attention, Dense, Layer, Lightning, MoE
from kvcalc.layers.indexed import IndexedAttention


def minimax(c: Config) -> dict:
    """MiniMax-Text-01: lightning attention and softmax GQA attention (layer_types, else
    alternating from a softmax layer), routed experts on every layer."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = c.opt_int("head_dim", 0) or hidden // heads
    if c.raw("sliding_window") not in (MISSING, None):
        # transformers windows the softmax layers' mask but its MiniMaxCache keeps every token
        raise c.error("field 'sliding_window' is set: kvcalc reads MiniMax with full softmax "
                      "attention only (null)")
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: ["full" if i % 2 == 0 else "linear" for i in range(layers)])
    attn = Attention(heads, kv_heads, head_dim)
    lightning = Lightning(heads=heads, head_dim=head_dim)
    moe = MoE(experts=c.opt_int("num_local_experts", 8) or 1,
              active=c.opt_int("num_experts_per_tok", 2) or 1, expert_d_ff=d_ff)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096 * 32) or 0,
                         notes=["hybrid: lightning attention layers hold a constant state; "
                                "softmax attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else lightning, moe, 2) for k in kinds])


def minimax_m2(c: Config) -> dict:
    """MiniMax-M2 (M2, M2.1, M2.5): GQA with q/k RMSNorms over all heads' width, every
    layer 256 experts of intermediate_size, no shared expert."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    moe = MoE(experts=c.req_int("num_local_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff)
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qk_norm=(heads + kv_heads) * head_dim)
    mtp = c.opt_int("num_mtp_modules", 0) or 0
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 196608) or 0,
                         notes=[f"{mtp} multi-token-prediction module(s) in the checkpoint "
                                "are not counted (transformers does not build them)"]
                         if mtp else [])
    return with_runs(fields, [Layer(attn, moe, 2)] * layers)


# MiniMaxM3VLTextConfig: the original checkpoint's sparse_attention_config keys, and the
# flat fields the class reads them into (those win when both are given).
_SPARSE_KEYS = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
                "index_block_size": "sparse_block_size",
                "index_topk_blocks": "sparse_topk_blocks",
                "index_local_blocks": "sparse_local_block"}


def _sparse_config(c: Config) -> Config:
    value = c.raw("sparse_attention_config")
    if value is MISSING or value is None:
        return c.over({}, c.where)
    if not isinstance(value, dict):
        raise c.error(f"field 'sparse_attention_config' must be an object, got "
                      f"{describe(value)}")
    return c.over(value, f"{c.where}: sparse_attention_config")


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


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "minimax": minimax, "minimax_m2": minimax_m2, "minimax_m3_vl_text": minimax_m3_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "minimax_m2": {"head_dim": 128, "num_experts_per_tok": 8, "num_key_value_heads": 8,
                   "num_local_experts": 256},
    "minimax_m3_vl_text": {"dense_intermediate_size": 12288, "head_dim": 128,
                           "num_key_value_heads": 4, "index_block_size": 128,
                           "index_head_dim": 128, "index_n_heads": 4, "index_local_blocks": 1,
                           "index_topk_blocks": 16, "num_experts_per_tok": 4,
                           "num_local_experts": 128, "max_position_embeddings": 524288,
                           "shared_intermediate_size": 3072},
}
