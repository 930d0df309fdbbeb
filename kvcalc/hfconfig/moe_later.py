"""Mixture-of-experts decoders of 2025-2026 that transformers 5 builds and that have no
dense MLP width of their own (every layer routed experts and a shared MLP): Solar Open,
Kolibri 1; and A.X K2 (DeepSeek-V3.2's attention with a gated query and gated norms).

Read as the family's configuration class and decoder layer in transformers 5.24 read them.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, latent_fields, with_runs
from kvcalc.hfconfig.config import Config
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, every_nth_full, layer_kinds,
                                         required_window)
from kvcalc.hfconfig.moe_2026 import _dense_then_moe
from kvcalc.layers import Dense, Layer, MoE
from kvcalc.layers_indexed import IndexedLatent


def _experts_only(c: Config, moe: MoE, *, kinds: list[str] | None = None,
                  qkv_bias: bool = False, qk_norm: bool = False, norms: int = 2,
                  context: int) -> dict:
    """A decoder whose every layer is GQA (`kinds` per layer, default all full; per-head
    q/k RMSNorms when `qk_norm`) and `moe`, with `norms` hidden-wide norms a layer."""
    hidden, layers, heads, vocab = (c.req_dim(key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    kinds = kinds or ["full"] * layers
    window = required_window(c) if "sliding" in kinds else 0
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=qkv_bias, qk_norm=2 * head_dim if qk_norm else 0),
                        moe, norms) for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, moe.expert_d_ff, vocab,
                         qkv_bias=qkv_bias, qk_norm=qk_norm, norms_per_layer=norms,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", context) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def solar_open(c: Config) -> dict:
    """Solar Open: GQA (q/k/v biases when attention_bias, o_proj never), every layer
    routed experts of moe_intermediate_size plus one shared MLP n_shared_experts times as
    wide; the router's score-correction bias is a buffer (not counted)."""
    expert_ff = c.req_int("moe_intermediate_size")
    shared = c.opt_int("n_shared_experts", 0) or 0
    # SolarOpenConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1 if shared else 0, shared_d_ff=expert_ff * shared)
    return _experts_only(c, moe, qkv_bias=c.opt_bool("attention_bias", False), context=131072)


def kolibri1(c: Config) -> dict:
    """Kolibri 1: four sliding layers to one global (layer_types; the global ones NoPE),
    per-head q/k RMSNorms, four norms a layer, every layer routed experts of
    moe_intermediate_size and a shared MLP of shared_expert_intermediate_size (0: none);
    the router's score-correction bias is a buffer (not counted)."""
    layers = c.req_dim("num_hidden_layers")
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    # Kolibri1Config's attribute_map: num_experts is num_local_experts
    moe = MoE(experts=c.req_int("num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                        lambda: every_nth_full(layers, 5))  # Kolibri1Config's default
    return _experts_only(c, moe, kinds=kinds, qk_norm=True, norms=4, context=262144)


def axk2(c: Config) -> dict:
    """A.X K2 (AXK2): DeepSeek-V3.2's MLA and lightning indexer on every layer, but its
    query comes from one fused q_gate_proj (2 x q_lora_rank in, q and an output gate per
    head out) instead of q_b_proj; gated RMSNorms (a low-rank gate MLP, gated_norm_rank
    wide) before attention, and before the MLP on sparse layers; dense layers by
    mlp_layer_types (else first_k_dense_replace, 1), routed + shared experts after."""
    hidden, layers, heads, vocab = (c.req_dim(key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    d_ff = c.req_dim("intermediate_size")
    bias = c.opt_bool("attention_bias", False)
    mla = IndexedLatent(
        heads=heads, kv_lora_rank=c.req_dim("kv_lora_rank"),
        rope_dim=c.req_dim("qk_rope_head_dim"), nope_dim=c.req_dim("qk_nope_head_dim"),
        v_dim=c.req_dim("v_head_dim"), q_lora_rank=c.req_dim("q_lora_rank"), bias=bias,
        index_heads=c.req_dim("index_n_heads"), index_head_dim=c.req_dim("index_head_dim"),
        index_topk=c.req_dim("index_topk"))
    moe = MoE(experts=c.req_dim("n_routed_experts"), active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=c.req_dim("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    mlps = _dense_then_moe(c, layers, Dense(d_ff), moe, first=1)
    qk_dim = mla.nope_dim + mla.rope_dim
    # q_gate_proj (2r -> heads x (qk + v)) where the Latent counts q_b_proj (r -> heads x qk)
    q_gate = heads * (2 * mla.q_lora_rank * (qk_dim + mla.v_dim) - mla.q_lora_rank * qk_dim)
    gate_mlp = 2 * hidden * (c.opt_int("gated_norm_rank", 16) or 0)  # fc1 and fc2, no bias
    gated_norms = layers + sum(1 for m in mlps if m is moe)
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 131072,
                           extra_params=layers * q_gate + gated_norms * gate_mlp,
                           notes=["q_gate_proj's query and output gate beyond q_b_proj's "
                                  "query, and the gated norms' gate MLPs (extra_params)"])
    return with_runs(fields, [Layer(mla, mlp, 2) for mlp in mlps])
