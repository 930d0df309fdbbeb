"""Qwen's mixture-of-experts and hybrid models: Qwen2-MoE and Qwen3-MoE (and OLMoE,
FlexOlmo, read by the same class shape), Qwen3-Next, Qwen3.5 and Qwen3.5-MoE, Qwen4-Exp.
Qwen2 and Qwen3 dense are read as Llama (kvcalc.hfconfig.llama.llama_like).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, flat_fields, sparse_layers,
                                    with_runs)
from kvcalc.hfconfig.layer_types import every_nth_full, layer_kinds
from kvcalc.layers import Attention, Dense, GatedDeltaNet, Layer, MoE
from kvcalc.layers.indexed import QSAAttention


_OLMO_MOE = ("olmoe", "flex_olmo")  # experts on every layer, of intermediate_size


def qwen_moe(c: Config) -> dict:
    """Qwen2-MoE / Qwen3-MoE / OLMoE / FlexOlmo: routed experts of moe_intermediate_size on
    the sparse layers; Qwen2-MoE adds a gated shared expert; Qwen3 and OLMoE q/k norms
    (FlexOlmo: OLMoE's experts and q/k norms, OLMo 2's norms after attention and MLP)."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    if family in _OLMO_MOE:
        sparse = [True] * layers
        experts = c.req_int("num_experts")
        expert_ff = d_ff
    else:
        sparse = sparse_layers(c, layers)
        experts = c.opt_int("num_experts", 0) or 0
        expert_ff = c.req_int("moe_intermediate_size") if experts else d_ff
    shared = 0
    shared_ff = 0
    if family == "qwen2_moe":
        shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
        shared = 1 if shared_ff else 0
    qkv_bias = c.opt_bool("qkv_bias", True) if family == "qwen2_moe" else c.opt_bool(
        "attention_bias", False)
    out_bias = False if family == "qwen2_moe" else qkv_bias
    # OLMoE's q_norm is hidden_size wide, FlexOlmo's num_attention_heads x head_dim
    qk = {"qwen3_moe": 2 * head_dim, "olmoe": hidden + kv_heads * head_dim,
          "flex_olmo": (heads + kv_heads) * head_dim}.get(family, 0)
    moe = MoE(experts=experts, active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=shared, shared_d_ff=shared_ff, shared_gate=bool(shared)) if experts else None
    dense = Dense(d_ff)
    if family not in _OLMO_MOE and c.opt_bool("use_sliding_window", False):
        raise c.error("use_sliding_window is true: sliding layers in MoE Qwen configs are "
                      "not supported")
    attn = Attention(heads=heads, kv_heads=kv_heads, head_dim=head_dim, qkv_bias=qkv_bias,
                     out_bias=out_bias, qk_norm=qk)
    layer_list = [Layer(attn, moe if (s and moe) else dense, 2) for s in sparse]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=qkv_bias, out_bias=out_bias, qk_norm=bool(qk),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def qwen3_next(c: Config) -> dict:
    """Qwen3-Next: Gated DeltaNet linear attention on 3 of 4 layers (layer_types, else
    full_attention_interval), gated full attention with q/k norms on the rest; MoE with
    a gated shared expert (sparse layers as Qwen MoE)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: every_nth_full(
                            layers, c.opt_int("full_attention_interval", 4) or 4, "linear"))
    linear = GatedDeltaNet(k_heads=c.req_int("linear_num_key_heads"),
                           v_heads=c.req_int("linear_num_value_heads"),
                           k_dim=c.req_int("linear_key_head_dim"),
                           v_dim=c.req_int("linear_value_head_dim"),
                           conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=2 * head_dim, gated=True)
    sparse = sparse_layers(c, layers)
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1 if shared_ff else 0,
              shared_d_ff=shared_ff, shared_gate=bool(shared_ff))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; full attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])


# Each family's config-class defaults for the fields its reader takes as optional.
_QWEN3_5 = {"num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 32768}


_QWEN3_5_MOE = {"num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768}


def _qwen_delta_net(c: Config) -> GatedDeltaNet:
    """Qwen3.5's (and Qwen4-Exp's) Gated DeltaNet, with their class defaults."""
    return GatedDeltaNet(k_heads=c.opt_int("linear_num_key_heads", 16) or 16,
                         v_heads=c.opt_int("linear_num_value_heads", 32) or 32,
                         k_dim=c.opt_int("linear_key_head_dim", 128) or 128,
                         v_dim=c.opt_int("linear_value_head_dim", 128) or 128,
                         conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)


def _qwen_moe(c: Config, *, experts: int, active: int) -> MoE:
    """Qwen3.5-MoE's (and Qwen4-Exp's) routed experts beside one gated shared expert,
    with the class's expert counts as defaults."""
    shared_ff = c.opt_int("shared_expert_intermediate_size", 512) or 0
    d_ff = c.opt_int("moe_intermediate_size", 512) or 1
    return MoE(experts=c.opt_int("num_experts", experts) or 1,
               active=c.opt_int("num_experts_per_tok", active) or 1, expert_d_ff=d_ff,
               shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff,
               shared_gate=bool(shared_ff))


def _qwen_kinds(c: Config, layers: int, names: dict[str, str]) -> list[str]:
    """layer_types by `names`, else every full_attention_interval-th layer full (4)."""
    return layer_kinds(c, layers, names, lambda: every_nth_full(
        layers, c.opt_int("full_attention_interval", 4) or 4, "linear"))


def qwen3_5(c: Config) -> dict:
    """Qwen3.5 / Qwen3.6: Gated DeltaNet linear attention on 3 of 4 layers (layer_types,
    else full_attention_interval), gated full attention with q/k norms on the rest;
    a dense gated MLP (qwen3_5_text) or routed experts with a gated shared expert on every
    layer (qwen3_5_moe_text)."""
    moe_family = c.model_type == "qwen3_5_moe_text"
    defaults = _QWEN3_5_MOE if moe_family else _QWEN3_5
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    kv_heads = c.opt_int("num_key_value_heads", defaults["num_key_value_heads"]) or heads
    head_dim = c.opt_int("head_dim", defaults["head_dim"]) or hidden // heads
    kinds = _qwen_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"})
    linear = _qwen_delta_net(c)
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=2 * head_dim, gated=True)
    if moe_family:
        mlp = _qwen_moe(c, experts=256, active=8)
        d_ff = mlp.expert_d_ff
    else:
        d_ff = c.req_dim("intermediate_size")
        mlp = Dense(d_ff)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings",
                                               defaults["max_position_embeddings"]) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; full attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, mlp, 2) for k in kinds])


def qwen4_exp(c: Config) -> dict:
    """Qwen4-Exp: Qwen3.5-MoE's Gated DeltaNet and gated attention, the attention's tokens
    picked by a QSA indexer, and hyper-connections (hc_count residual streams, a low-rank
    mixer before each mixer and MLP) in place of the layer norms."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    if c.raw("ple_layer_ids") not in (MISSING, None, []):
        raise c.error("kvcalc does not read Qwen4-Exp's per-layer n-gram embeddings "
                      "(ple_layer_ids)")
    if c.req_dim("indexer_kv_heads") != 1:
        raise c.error("field 'indexer_kv_heads' must be 1 (Qwen4-Exp's QSA indexer)")
    kv_heads = c.opt_int("num_key_value_heads", 2) or heads
    head_dim = c.opt_int("head_dim", 256) or hidden // heads
    # Qwen4ExpTextConfig: "full_attention" in a released layer_types is an indexed layer
    kinds = _qwen_kinds(c, layers, {"full_attention": "full", "indexed_attention": "full",
                                    "linear_attention": "linear"})
    linear = _qwen_delta_net(c)
    bias = c.opt_bool("attention_bias", False)
    attn = QSAAttention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                        qk_norm=2 * head_dim, gated=True,
                        index_heads=c.req_dim("indexer_n_heads"),
                        index_head_dim=c.req_dim("indexer_head_dim"),
                        index_budget=c.req_dim("indexer_budget"),
                        index_compress_ratio=c.req_dim("indexer_compress_ratio"))
    mlp = _qwen_moe(c, experts=512, active=10)
    d_ff = mlp.expert_d_ff
    streams, rank = c.req_dim("hc_count"), c.req_dim("hc_lowrank")
    wide = streams * hidden
    # Qwen4ExpTextGatedResidual: a grouped RMSNorm over the streams, the low-rank mixer
    # (down, up) and the streams' injection weights; two a layer, and the model's last
    # (no injection) where the final norm would be
    mixer_params = wide + 2 * wide * rank
    extra = layers * 2 * (mixer_params + wide * streams) + mixer_params
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True, norms_per_layer=0,
                         final_norm=False, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; QSA attention layers cache every token and its "
                                "indexer key",
                                f"hyper-connections ({streams} streams, rank {rank}): "
                                f"{extra:,} parameters in extra_params, their matmuls not "
                                "in the FLOPs"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, mlp, 0) for k in kinds])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "qwen2_moe": qwen_moe, "qwen3_moe": qwen_moe, "olmoe": qwen_moe, "flex_olmo": qwen_moe,
    "qwen3_next": qwen3_next, "qwen3_5_text": qwen3_5, "qwen3_5_moe_text": qwen3_5,
    "qwen4_exp_text": qwen4_exp,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_moe": {"num_experts": 60, "num_key_value_heads": 16, "moe_intermediate_size": 1408,
                  "num_experts_per_tok": 4, "shared_expert_intermediate_size": 5632},
    "qwen3_moe": {"num_experts": 128, "num_key_value_heads": 4, "moe_intermediate_size": 768,
                  "num_experts_per_tok": 8},
    "olmoe": {"max_position_embeddings": 4096, "num_experts": 64, "num_experts_per_tok": 8},
    "flex_olmo": {"max_position_embeddings": 4096, "num_experts": 7, "num_experts_per_tok": 5},
    "qwen3_next": {"head_dim": 256, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                   "linear_num_value_heads": 32, "linear_value_head_dim": 128,
                   "moe_intermediate_size": 512, "num_experts": 512, "num_experts_per_tok": 10,
                   "num_key_value_heads": 2, "shared_expert_intermediate_size": 512},
    "qwen4_exp_text": {"hc_count": 4, "hc_lowrank": 320},
}
