"""Cohere's decoders: Command R (cohere), Command R7B (cohere2), Command A MoE
(cohere2_moe).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (Config, attention, core_dims, dense_then_moe, flat_fields,
                                    required_window, with_runs)
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds, sliding_window_pattern
from kvcalc.layers import Dense, Layer, MoE


def cohere(c: Config) -> dict:
    """Cohere (Command R) and Cohere2 (Command R7B): one weight-only LayerNorm per layer
    (attention and MLP in parallel), tied embeddings; Cohere2 slides on 3 of 4 layers."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    qk = (heads + kv_heads) * head_dim if c.opt_bool("use_qk_norm", False) else 0
    if family == "cohere2":
        kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                            lambda: sliding_window_pattern(c, layers, 4))
    else:
        kinds = ["full"] * layers
    window = required_window(c) if "sliding" in kinds else 0
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias, qk_norm=qk), Dense(d_ff), 1)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False, norms_per_layer=1,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["attention and MLP in parallel, one LayerNorm per layer"])
    return with_runs(fields, layer_list)


def cohere2_moe(c: Config) -> dict:
    """Command A MoE (Cohere2MoeConfig): Cohere 2's parallel block (one norm a layer,
    attention and MLP side by side), dense prefix layers then routed experts of
    intermediate_size and optional shared ones; sliding layers by sliding_window_pattern,
    the dense prefix's by prefix_dense_sliding_window_pattern (layer_types first)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    # Cohere2MoeConfig takes first_k_dense_replace in place of the two lists, and keeps
    # only the lists it derives from it.
    first = c.opt_int("first_k_dense_replace", 0) or 0

    def older() -> list[str]:
        prefix = c.opt_int("prefix_dense_sliding_window_pattern", 1) or 1
        every = c.opt_int("sliding_window_pattern", 4) or 4
        return (["sliding" if (i + 1) % prefix else "full" for i in range(first)]
                + ["sliding" if (i + 1) % every else "full" for i in range(layers - first)])

    kinds = layer_kinds(c, layers, ATTENTION_TYPES, older)
    window = required_window(c) if "sliding" in kinds else 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=c.opt_int("num_shared_experts", 0) or 0)
    dense = Dense(c.opt_int("prefix_dense_intermediate_size", None) or d_ff)
    mlps = dense_then_moe(c, layers, dense, moe, first=first)
    bias = c.opt_bool("attention_bias", False)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias), mlp, 1)
                  for k, mlp in zip(kinds, mlps)]
    # An RMSNorm when rms_norm_eps is set, else a bias-free LayerNorm: one weight either way.
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False, norms_per_layer=1,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["attention and MLP in parallel, one norm per layer"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "cohere": cohere, "cohere2": cohere, "cohere2_moe": cohere2_moe,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "cohere2": {"sliding_window": 4096},
    "cohere2_moe": {"head_dim": 128, "num_experts": 8, "num_experts_per_tok": 2,
                    "sliding_window": 4096},
}
