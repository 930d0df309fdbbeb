"""Ling 3's bailing_hybrid: its delta attention beside gated MLA.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, core_dims, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Dense, KimiDelta, Latent, Layer, MoE


def bailing_hybrid(c: Config) -> dict:
    """Ling 3 (bailing_hybrid): a Kimi-style delta attention with full-rank gates on the
    layers between every `layer_group_size`-th, gated MLA on those; routed experts with
    shared ones after the first dense layers (mlp_layer_types)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.opt_int("kv_lora_rank", 512) or 512,
                 rope_dim=c.opt_int("qk_rope_head_dim", 64) or 0,
                 nope_dim=c.opt_int("qk_nope_head_dim", 128) or 0,
                 v_dim=c.opt_int("v_head_dim", 128) or 128,
                 q_lora_rank=c.opt_int("q_lora_rank", 0) or 0, bias=bias, head_gate=True)
    # BailingHybridConfig.__post_init__: the linear heads are the attention heads, their
    # size config.json's head_dim (which it then overwrites with qk_rope_head_dim), the
    # kernel short_conv_kernel_size; a config it saved states them as linear_* (which win)
    delta = KimiDelta(heads=c.opt_int("linear_num_heads", None) or heads,
                      head_dim=c.opt_int("linear_head_dim", None) or c.opt_int("head_dim", 128)
                      or 128,
                      conv_kernel=c.opt_int("linear_conv_kernel_dim", None)
                      or c.opt_int("short_conv_kernel_size", 4) or 4, low_rank=False)
    group = c.opt_int("layer_group_size", 6) or 6
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: ["full" if (i + 1) % group == 0 else "linear"
                                 for i in range(layers)])
    dense = c.opt_int("first_k_dense_replace", 2) or 0
    mlp_types = c.raw("mlp_layer_types")
    if isinstance(mlp_types, list):
        if len(mlp_types) != layers or set(mlp_types) - {"dense", "sparse"}:
            raise c.error("mlp_layer_types must list 'dense' or 'sparse' for every layer")
        sparse = [t == "sparse" for t in mlp_types]
    else:
        sparse = [i >= dense for i in range(layers)]
    # BailingHybridConfig's attribute_map: config.json holds num_experts,
    # num_experts_per_token, num_shared_experts and model_max_length
    expert_ff = c.opt_int("moe_intermediate_size", 768) or 1
    shared = c.opt_int("num_shared_experts", 1, "n_shared_experts") or 0
    moe = MoE(experts=c.opt_int("num_experts", 512, "num_local_experts") or 1,
              active=c.opt_int("num_experts_per_token", 8, "num_experts_per_tok") or 1,
              expert_d_ff=expert_ff, shared_experts=1 if shared else 0,
              shared_d_ff=expert_ff * shared)
    fields = flat_fields(hidden, layers, heads, 1, mla.kv_lora_rank, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("model_max_length", 262144,
                                               "max_position_embeddings") or 0,
                         notes=["hybrid: delta-attention layers hold a constant state; gated "
                                "MLA layers cache one latent per token; the MTP layers "
                                "(num_mtp_layers) are not built by transformers, nor counted"])
    return with_runs(fields, [Layer(mla if k == "full" else delta, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "bailing_hybrid": bailing_hybrid,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
