"""SK Telecom's A.X K1 (axk1: DeepSeek-V3's shape) and A.X K2 (axk2: DeepSeek-V3.2's
attention with a gated query and gated norms).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, dense_then_moe, latent_fields,
                                    mtp_note, with_runs)
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers.indexed import IndexedLatent


def axk1(c: Config) -> dict:
    """A.X K1 (AXK1): DeepSeek-V3's MLA, always with a q LoRA, and routed + shared experts
    whose block ends in its own norm (post_mlp_layernorm: three norms on a sparse layer),
    the first layer dense unless mlp_layer_types says otherwise."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.req_dim("kv_lora_rank"),
                 rope_dim=c.req_dim("qk_rope_head_dim"), nope_dim=c.req_dim("qk_nope_head_dim"),
                 v_dim=c.req_dim("v_head_dim"), q_lora_rank=c.req_dim("q_lora_rank"), bias=bias)
    moe = MoE(experts=c.req_dim("n_routed_experts"), active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=c.req_dim("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    dense = Dense(d_ff)
    if c.raw("mlp_layer_types") in (MISSING, None):
        # AXK1Config's legacy fields: sparse from first_k_dense_replace (1), every
        # moe_layer_freq-th (1) layer
        first = c.opt_int("first_k_dense_replace", 1) or 0
        every = c.opt_int("moe_layer_freq", 1) or 1
        mlps = [moe if i >= first and i % every == 0 else dense for i in range(layers)]
    else:
        mlps = dense_then_moe(c, layers, dense, moe)
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 32768,
                           notes=mtp_note(c))
    return with_runs(fields, [Layer(mla, mlp, 3 if mlp is moe else 2) for mlp in mlps])


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
    mlps = dense_then_moe(c, layers, Dense(d_ff), moe, first=1)
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


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "axk2": axk2, "axk1": axk1,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "axk2": {"index_head_dim": 128, "index_n_heads": 16, "index_topk": 2048, "kv_lora_rank": 128,
             "moe_intermediate_size": 512, "n_routed_experts": 128, "n_shared_experts": 1,
             "num_experts_per_tok": 8, "q_lora_rank": 384, "qk_nope_head_dim": 64,
             "qk_rope_head_dim": 32, "v_head_dim": 64},
    "axk1": {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
             "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 192,
             "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048},
}
