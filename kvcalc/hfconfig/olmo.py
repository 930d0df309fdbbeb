"""OLMo, OLMo 2, OLMo 3 and OLMo Hybrid (OLMoE and FlexOlmo are read with Qwen's
experts: kvcalc.hfconfig.qwen).

OLMo Hybrid (OlmoHybridConfig, transformers 5.24 `models/olmo_hybrid`): OLMo 3's
attention layers between Gated DeltaNet layers, every layer with a gated MLP.

- `full_attention` layers: OLMo 2/3's (no input norm; post-attention and post-feedforward
  RMSNorms; q and k RMSNorms over all heads' width);
- `linear_attention` layers: Gated DeltaNet (q, k, v, a, b and output-gate projections,
  a bias-free causal convolution over q, k and v, A_log, dt_bias, a gated norm per value
  head): the weights and state of kvcalc.layers.state.GatedDeltaNet; an input and a
  post-attention RMSNorm;
- by default every 4th layer attends (the last one when none would); the linear heads
  default to the attention heads, the key head size to 0.75 x hidden / heads and the
  value head size to twice that.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (Config, attention, core_dims, flat_fields, required_window,
                                    with_runs)
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, every_nth_full, layer_kinds
from kvcalc.layers import Attention, Dense, Layer
from kvcalc.layers.state import GatedDeltaNet


def olmo(c: Config) -> dict:
    """OLMo: LayerNorms without parameters. OLMo 2: no input norm, post-attention and
    post-feedforward RMSNorms, q/k RMSNorms over all heads' width."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    bias = c.opt_bool("attention_bias", False)
    if family == "olmo":
        attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias)
        norms, final = 0, False
    else:
        attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                         qk_norm=(heads + kv_heads) * head_dim)
        norms, final = 2, True
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, norms_per_layer=norms, final_norm=final,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=["OLMo's LayerNorms have no parameters"] if family == "olmo"
                         else [])
    return with_runs(fields, [Layer(attn, Dense(d_ff), norms)] * layers)


def olmo3(c: Config) -> dict:
    """OLMo 3: OLMo 2's layer (q/k norms over all heads, post-attention and
    post-feedforward norms) with three sliding layers to one global."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = hidden // heads
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: every_nth_full(layers, 4))
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias,
                                  qk_norm=(heads + kv_heads) * head_dim), Dense(d_ff), 2)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def _default_kinds(layers: int) -> list[str]:
    kinds = ["full" if i % 4 == 3 else "linear" for i in range(layers)]
    if "full" not in kinds:
        kinds[-1] = "full"
    return kinds


def olmo_hybrid(c: Config) -> dict:
    """OLMo Hybrid: OLMo 3 attention every 4th layer, Gated DeltaNet between."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    k_heads = c.opt_int("linear_num_key_heads", heads) or heads
    v_heads = c.opt_int("linear_num_value_heads", heads) or heads
    k_dim = c.opt_int("linear_key_head_dim", None) or int(0.75 * hidden / k_heads)
    v_dim = c.opt_int("linear_value_head_dim", None) or 2 * k_dim
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: _default_kinds(layers))
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=(heads + kv_heads) * head_dim)
    linear = GatedDeltaNet(k_heads=k_heads, v_heads=v_heads, k_dim=k_dim, v_dim=v_dim,
                           conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    mlp = Dense(d_ff)
    layer_list = [Layer(attn if k == "full" else linear, mlp, 2) for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 65536) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "olmo": olmo, "olmo2": olmo, "olmo3": olmo3, "olmo_hybrid": olmo_hybrid,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo3": {"sliding_window": 4096},
}
