"""Mixture-of-experts decoders of 2025-2026 that mix sliding and full attention layers,
several with an output gate on attention: MiMo-V2-Flash, Laguna, AFMoE (Arcee Trinity),
Beam, Flint (Sarvam's two are read as GLM-4.5 and DeepSeek-V3: kvcalc.hfconfig.glm,
kvcalc.hfconfig.deepseek).

Read as each family's configuration class and decoder layer in transformers 5.24 read
them (`configuration_<family>.py`, `modeling_<family>.py`). A router's score-correction
bias counts where the module holds it as a parameter (Laguna, AFMoE), not where it is a
buffer (MiMo-V2-Flash, Beam).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, describe, flat_fields,
                                    required_window, with_runs)
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import Attention, Dense, Layer, MoE
from kvcalc.layers.gated import OutputGatedAttention


def _mlp_kinds(c: Config, layers: int, default: Callable[[int], bool]) -> list[bool]:
    """Whether each layer's MLP is sparse: `mlp_layer_types` ("dense"/"sparse") when
    listed, else `default(i)`, the class's own pattern."""
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        return [default(i) for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    return [t == "sparse" for t in types]


def _kinds(c: Config, layers: int, full: Callable[[int], bool]) -> list[str]:
    """Each layer's attention kind: `layer_types`, else full where `full(i)`, else sliding."""
    return layer_kinds(c, layers, ATTENTION_TYPES,
                       lambda: ["full" if full(i) else "sliding" for i in range(layers)])


def _model(c: Config, layer_list: list[Layer], head_dim: int, kv_heads: int, *,
           context: int, qk_norm: bool = False, bias: bool = False, norms: int = 2,
           notes: tuple[str, ...] = ()) -> dict:
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=qk_norm, norms_per_layer=norms,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", context) or 0,
                         notes=list(notes))
    return with_runs(fields, layer_list)


def mimo_v2_flash(c: Config) -> dict:
    """MiMo-V2-Flash: full attention on the first and every sixth layer, sliding on the
    rest with twice the K/V heads and a sink logit per query head; value heads narrower
    than query/key heads; a dense first layer, then 256 routed experts, none shared."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.req_dim("num_key_value_heads")
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    v_dim = c.req_dim("v_head_dim")
    kinds = _kinds(c, layers, lambda i: i == 0 or (i + 1) % 6 == 0)
    window = 0
    if "sliding" in kinds:
        # MiMoV2FlashConfig: the reference implementation attends to sliding_window_size
        # earlier tokens plus the query, so a config naming it gets that plus one.
        size = c.opt_int("sliding_window_size", None)
        window = size + 1 if size is not None else required_window(c)
    bias = c.opt_bool("attention_bias", False)
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"))
    sparse = _mlp_kinds(c, layers, lambda i: i > 0)

    def attn(kind: str) -> Attention:
        sliding = kind == "sliding"
        return Attention(kind=kind, window=window if sliding else 0, heads=heads,
                         kv_heads=kv_heads * (2 if sliding else 1), head_dim=head_dim,
                         v_head_dim=v_dim, qkv_bias=bias, sinks=sliding)  # o_proj: no bias

    layer_list = [Layer(attn(k), moe if s else Dense(d_ff), 2) for k, s in zip(kinds, sparse)]
    fields = _model(c, layer_list, head_dim, kv_heads, context=131072, notes=(
        "sliding layers hold twice num_key_value_heads K/V heads",))
    return {**fields, "qkv_bias": bias, "out_bias": False, "v_head_dim": v_dim}


def laguna(c: Config) -> dict:
    """Laguna: GQA with q/k RMSNorms and a g_proj output gate (per head, or per element
    when `gating` is neither true nor "per-head"), query heads per layer
    (num_attention_heads_per_layer), a dense first layer, then routed experts with a
    learned score correction beside one shared expert."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    per_layer = c.raw("num_attention_heads_per_layer")
    if per_layer is MISSING or per_layer is None:
        per_layer = [heads] * layers
    if not isinstance(per_layer, list) or len(per_layer) != layers:
        raise c.error(f"field 'num_attention_heads_per_layer' must list {layers} entries, "
                      f"got {describe(per_layer)}")
    per_layer = [c.check_int("num_attention_heads_per_layer", h) for h in per_layer]
    gating = c.raw("gating")
    gate_width = 1 if gating in (MISSING, None, True, "per-head") else head_dim
    bias = c.opt_bool("attention_bias", False)
    kinds = _kinds(c, layers, lambda i: True)
    window = required_window(c) if "sliding" in kinds else 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1,
              shared_d_ff=c.req_int("shared_expert_intermediate_size"),
              router_bias=True)  # e_score_correction_bias: a parameter
    sparse = _mlp_kinds(c, layers, lambda i: i > 0)
    layer_list = [
        Layer(OutputGatedAttention(kind=k, window=window if k == "sliding" else 0, heads=h,
                                   kv_heads=kv_heads, head_dim=head_dim, qkv_bias=bias,
                                   out_bias=bias, qk_norm=2 * head_dim, gate_width=gate_width,
                                   gate_module="g_proj"),
              moe if s else Dense(d_ff), 2)
        for k, h, s in zip(kinds, per_layer, sparse)]
    return _model(c, layer_list, head_dim, kv_heads, context=131072, qk_norm=True, bias=bias)


def afmoe(c: Config) -> dict:
    """AFMoE (Arcee Trinity): GQA with q/k RMSNorms and a per-element output gate, three
    sliding layers to one global (global_attn_every_n_layers), norms before and after
    attention and MLP, num_dense_layers dense, then routed experts (a learned expert
    bias) beside num_shared_experts shared ones fused into one MLP."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    every = c.opt_int("global_attn_every_n_layers", 4) or 4
    kinds = _kinds(c, layers, lambda i: (i + 1) % every == 0)
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    expert_d_ff = c.req_int("moe_intermediate_size")
    shared = c.opt_int("num_shared_experts", 0) or 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=expert_d_ff, shared_experts=1 if shared else 0,
              shared_d_ff=expert_d_ff * shared, router_bias=True)  # expert_bias: a parameter
    dense_layers = c.opt_int("num_dense_layers", 0) or 0
    layer_list = [
        Layer(OutputGatedAttention(kind=k, window=window if k == "sliding" else 0, heads=heads,
                                   kv_heads=kv_heads, head_dim=head_dim, qkv_bias=bias,
                                   out_bias=bias, qk_norm=2 * head_dim, gate_width=head_dim),
              moe if i >= dense_layers else Dense(d_ff), 4)
        for i, k in enumerate(kinds)]
    return _model(c, layer_list, head_dim, kv_heads, context=16384, qk_norm=True, bias=bias,
                  norms=4)


def beam(c: Config) -> dict:
    """Beam: GQA with q/k RMSNorms and a per-element output gate with one bias per head,
    five sliding layers to one global and the last global, norms before and after
    attention and MLP, three dense layers, then routed experts, none shared."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    kinds = _kinds(c, layers, lambda i: (i + 1) % 6 == 0 or i == layers - 1)
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"))
    sparse = _mlp_kinds(c, layers, lambda i: i >= min(3, layers))
    layer_list = [
        Layer(OutputGatedAttention(kind=k, window=window if k == "sliding" else 0, heads=heads,
                                   kv_heads=kv_heads, head_dim=head_dim, qkv_bias=bias,
                                   out_bias=bias, qk_norm=2 * head_dim, gate_width=head_dim,
                                   gate_bias=True),
              moe if s else Dense(d_ff), 4)
        for k, s in zip(kinds, sparse)]
    return _model(c, layer_list, head_dim, kv_heads, context=8192, qk_norm=True, bias=bias,
                  norms=4)


def flint(c: Config) -> dict:
    """Flint: GQA with q/k RMSNorms and a sink logit per query head, full attention on
    the first two layers, every fourth from layer 1 and the last, sliding elsewhere;
    routed experts beside one ungated shared expert except on mlp_only_layers."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    kinds = _kinds(c, layers, lambda i: i < 2 or i % 4 == 1 or i == layers - 1)
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    experts = c.opt_int("num_experts", 0) or 0
    dense_only = c.raw("mlp_only_layers")
    if dense_only is MISSING or dense_only is None:
        dense_only = [0, 1]  # FlintConfig's default
    if not isinstance(dense_only, list):
        raise c.error(f"field 'mlp_only_layers' must be a list, got {describe(dense_only)}")
    every = c.opt_int("decoder_sparse_step", 1) or 1
    sparse = [experts > 0 and i not in dense_only and (i + 1) % every == 0
              for i in range(layers)]
    moe = MoE(experts=experts, active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1,
              shared_d_ff=c.req_int("shared_expert_intermediate_size")) if any(sparse) else None
    layer_list = [
        Layer(Attention(kind=k, window=window if k == "sliding" else 0, heads=heads,
                        kv_heads=kv_heads, head_dim=head_dim, qkv_bias=bias, out_bias=bias,
                        qk_norm=2 * head_dim, sinks=True),
              moe if s else Dense(d_ff), 2)
        for k, s in zip(kinds, sparse)]
    return _model(c, layer_list, head_dim, kv_heads, context=262144, qk_norm=True, bias=bias)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "mimo_v2_flash": mimo_v2_flash, "laguna": laguna, "afmoe": afmoe, "beam": beam,
    "flint": flint,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "mimo_v2_flash": {"head_dim": 192, "v_head_dim": 128, "moe_intermediate_size": 2048,
                      "n_routed_experts": 256, "num_experts_per_tok": 8, "num_key_value_heads": 4,
                      "sliding_window": 129},
    "laguna": {"head_dim": 128, "moe_intermediate_size": 512, "num_experts": 256,
               "num_experts_per_tok": 8, "num_key_value_heads": 8,
               "shared_expert_intermediate_size": 512, "sliding_window": 512},
    "afmoe": {"head_dim": 128, "moe_intermediate_size": 1408, "num_dense_layers": 1,
              "num_experts": 64, "num_experts_per_tok": 6, "num_shared_experts": 2,
              "sliding_window": 1024},
    "beam": {"head_dim": 128, "moe_intermediate_size": 2560, "num_experts": 256,
             "num_experts_per_tok": 8, "num_key_value_heads": 8, "sliding_window": 512},
    "flint": {"head_dim": 128, "moe_intermediate_size": 512, "num_experts": 256,
              "num_experts_per_tok": 6, "num_key_value_heads": 4,
              "shared_expert_intermediate_size": 1024, "sliding_window": 513},
}
