"""GLM's decoders: GLM-4-9B-0414 and GLM-4-32B (glm, glm4), GLM-4.5/4.6/4.7 (glm4_moe),
GLM-4.7-Flash (glm4_moe_lite), and Sarvam-30B (sarvam_moe, built as GLM-4.5 under field
names of its own). GLM-5 is read as DeepSeek-V3.2 (kvcalc.hfconfig.deepseek).

Routers whose score-correction bias is a buffer (GLM-4.5) count no bias.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (Config, attention, core_dims, decoder, dense_then_moe,
                                    flat_fields, latent_fields, mtp_note, with_runs)
from kvcalc.layers import Dense, Latent, Layer, MoE


def glm(c: Config) -> dict:
    """GLM (glm-4-9b-chat-hf) and GLM-4 (GLM-4-9B/32B-0414): biased q/k/v, a fused
    gate_up MLP; GLM-4 adds post-attention and post-MLP norms (four a layer)."""
    return decoder(c, qkv_bias=c.opt_bool("attention_bias", True),
                   norms=4 if c.model_type == "glm4" else 2, context=131072)


def glm4_moe(c: Config) -> dict:
    """GLM-4.5/4.6/4.7 (Glm4MoeConfig): GQA with biased q/k/v (attention_bias) and
    optional per-head q/k norms, dense layers then routed + shared experts."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // heads), rounded down.
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    bias = c.opt_bool("attention_bias", False)
    qk = 2 * head_dim if c.opt_bool("use_qk_norm", False) else 0
    # Glm4MoeConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qkv_bias=bias, qk_norm=qk)
    mlps = dense_then_moe(c, layers, Dense(d_ff), moe)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, qk_norm=bool(qk),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=mtp_note(c))
    return with_runs(fields, [Layer(attn, mlp, 2) for mlp in mlps])


def glm4_moe_lite(c: Config) -> dict:
    """GLM-4.7-Flash (Glm4MoeLiteConfig): DeepSeek-V3's MLA and routed + shared experts,
    the first layer dense unless mlp_layer_types says otherwise."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    # Glm4MoeLiteConfig's attribute_map: head_dim is qk_rope_head_dim
    mla = Latent(heads=heads, kv_lora_rank=c.req_int("kv_lora_rank"),
                 rope_dim=c.req_int("qk_rope_head_dim", "head_dim"),
                 nope_dim=c.req_int("qk_nope_head_dim"),
                 v_dim=c.req_int("v_head_dim"), q_lora_rank=c.opt_int("q_lora_rank", 0) or 0,
                 bias=bias)
    # Glm4MoeLiteConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    mlps = dense_then_moe(c, layers, Dense(d_ff), moe, first=1)
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 202752,
                           notes=mtp_note(c))
    return with_runs(fields, [Layer(mla, mlp, 2) for mlp in mlps])


def sarvam_moe(c: Config) -> dict:
    """Sarvam-30B (SarvamMoEConfig, built as GLM-4.5): GQA with per-head q/k RMSNorms,
    a dense first layer, then routed experts beside one shared; the original config's
    num_experts, num_shared_experts and use_qkv_bias read as GLM-4.5's names."""
    return glm4_moe(c.renamed({"num_experts": "n_routed_experts",
                               "num_shared_experts": "n_shared_experts",
                               "use_qkv_bias": "attention_bias",
                               "num_mtp_layers": "num_nextn_predict_layers"}))


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "glm": glm, "glm4": glm, "glm4_moe": glm4_moe, "glm4_moe_lite": glm4_moe_lite,
    "sarvam_moe": sarvam_moe,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "glm": {"num_key_value_heads": 2},
    "glm4": {"num_key_value_heads": 2},
    "glm4_moe_lite": {"kv_lora_rank": 512, "moe_intermediate_size": 1536, "n_routed_experts": 64,
                      "n_shared_experts": 1, "num_experts_per_tok": 4, "q_lora_rank": 768,
                      "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256},
    "glm4_moe": {"first_k_dense_replace": 1, "moe_intermediate_size": 1408,
                 "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
                 "num_key_value_heads": 8},
    "sarvam_moe": {"head_dim": 64, "first_k_dense_replace": 1, "moe_intermediate_size": 1024,
                   "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 6,
                   "num_key_value_heads": 4, "use_qk_norm": True},
}
