"""OLMo Hybrid (OlmoHybridConfig, transformers 5.24 `models/olmo_hybrid`): OLMo 3's
attention layers between Gated DeltaNet layers, every layer with a gated MLP.

- `full_attention` layers: OLMo 2/3's (no input norm; post-attention and post-feedforward
  RMSNorms; q and k RMSNorms over all heads' width);
- `linear_attention` layers: Gated DeltaNet (q, k, v, a, b and output-gate projections,
  a bias-free causal convolution over q, k and v, A_log, dt_bias, a gated norm per value
  head): the weights and state of kvcalc.layers_state.GatedDeltaNet; an input and a
  post-attention RMSNorm;
- by default every 4th layer attends (the last one when none would); the linear heads
  default to the attention heads, the key head size to 0.75 x hidden / heads and the
  value head size to twice that.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import Config, core_dims
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Attention, Dense, Layer
from kvcalc.layers_state import GatedDeltaNet


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
