"""Mixture-of-experts decoders of 2025-2026 that transformers 5 builds and that have no
dense MLP width of their own: Solar Open.

Read as the family's configuration class and decoder layer in transformers 5.24 read them.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import Config
from kvcalc.layers import Layer, MoE


def solar_open(c: Config) -> dict:
    """Solar Open: GQA (q/k/v biases when attention_bias, o_proj never), every layer
    routed experts of moe_intermediate_size plus one shared MLP n_shared_experts times as
    wide; the router's score-correction bias is a buffer (not counted)."""
    hidden, layers, heads, vocab = (c.req_dim(key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    expert_ff = c.req_int("moe_intermediate_size")
    shared = c.opt_int("n_shared_experts", 0) or 0
    # SolarOpenConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1 if shared else 0, shared_d_ff=expert_ff * shared)
    bias = c.opt_bool("attention_bias", False)
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qkv_bias=bias)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, expert_ff, vocab,
                         qkv_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=[])
    return with_runs(fields, [Layer(attn, moe, 2)] * layers)
