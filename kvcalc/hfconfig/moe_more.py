"""More mixture-of-experts decoders that transformers 5 builds: dots.llm1 (dots1), Command A
MoE (cohere2_moe), K-EXAONE (exaone_moe).

Read as each family's configuration class and decoder layer in transformers 5.24 read
them. Their routers' score-correction biases (dots1, K-EXAONE) are buffers, not counted;
a shared expert of width n x w is counted as n experts of width w (the same weights).
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import Config, core_dims
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds, required_window
from kvcalc.hfconfig.llama_2026 import decoder, exaone4_kinds
from kvcalc.hfconfig.moe_2026 import _dense_then_moe, _mtp_note
from kvcalc.layers import Dense, Layer, MoE


def dots1(c: Config) -> dict:
    """dots.llm1 (Dots1Config): Qwen3's attention (per-head q/k RMSNorms), DeepSeek-V3's
    experts (routed + shared) after first_k_dense_replace dense layers; layers from
    max_window_layers on slide when a window is set (layer_types first)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)

    def older() -> list[str]:
        # Dots1Config: a window and i >= max_window_layers (62) -> sliding, whatever
        # use_sliding_window says (it reads no such field)
        if c.raw("sliding_window") is None:
            return ["full"] * layers
        first = c.opt_int("max_window_layers", layers) or 0
        return ["sliding" if i >= first else "full" for i in range(layers)]

    kinds = layer_kinds(c, layers, ATTENTION_TYPES, older)
    moe = MoE(experts=c.req_int("n_routed_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    first = c.opt_int("first_k_dense_replace", 0) or 0
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, kinds=kinds, context=2048,
                   experts=lambda dense: [dense if i < first else moe for i in range(layers)])


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
    mlps = _dense_then_moe(c, layers, dense, moe, first=first)
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


def exaone_moe(c: Config) -> dict:
    """K-EXAONE (ExaoneMoeConfig): EXAONE 4's attention (q/k RMSNorms, three sliding
    layers to one global), dense layers (mlp_layer_types, else the first
    first_k_dense_replace) then routed + shared experts."""
    layers = c.req_dim("num_hidden_layers")

    def mlps(dense: Dense) -> list:
        moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
                  expert_d_ff=c.req_int("moe_intermediate_size"),
                  shared_experts=c.opt_int("num_shared_experts", 0) or 0)
        return _dense_then_moe(c, layers, dense, moe, first=1)

    return decoder(c, qk_norm=True, kinds=exaone4_kinds(c), context=2048, experts=mlps,
                   notes=tuple(_mtp_note(c)))
