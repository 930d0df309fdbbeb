"""Kimi Linear: Kimi Delta Attention beside MLA (Kimi K2 and K2.5 are read as the
DeepSeek-V3 class they declare).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, core_dims, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Dense, KimiDelta, Latent, Layer, MoE


def _kimi_linear_config(c: Config) -> dict:
    """The checkpoint's `linear_attn_config` object ({} when absent), as the config class
    reads it: head_dim, num_heads, short_conv_kernel_size, 1-based full_attn_layers and
    kda_layers."""
    value = c.raw("linear_attn_config")
    if value is MISSING or value is None:
        return {}
    if not isinstance(value, dict):
        raise c.error("field 'linear_attn_config' must be an object")
    return value


def _sub_int(c: Config, sub: dict, key: str, field: str, default: int) -> int:
    """linear_attn_config[key] when the checkpoint has it, else the top-level field."""
    if key in sub:
        return c.check_int(f"linear_attn_config.{key}", sub[key])
    return c.opt_int(field, default) or default


def _kimi_layer_kinds(c: Config, layers: int, sub: dict) -> list[str]:
    """layer_types, else linear_attn_config's 1-based full_attn_layers / kda_layers, else
    a full layer every fourth from layer 4 (KimiLinearConfig's precedence)."""
    def older() -> list[str]:
        full, kda = sub.get("full_attn_layers"), sub.get("kda_layers")
        if isinstance(full, list) and isinstance(kda, list):
            kinds = [None] * layers
            for kind, listed in (("full", full), ("linear", kda)):
                for i in listed:
                    if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= layers:
                        raise c.error("linear_attn_config's layer lists must hold layer "
                                      f"numbers 1..{layers}")
                    kinds[i - 1] = kind
            if None in kinds:
                raise c.error("linear_attn_config's full_attn_layers and kda_layers leave "
                              "a layer out")
            return kinds
        return ["full" if i and i % 4 == 0 else "linear" for i in range(layers)]
    return layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"}, older)


def _kimi_sparse(c: Config, layers: int) -> list[bool]:
    """mlp_layer_types ("dense" / "sparse"), else dense before first_k_dense_replace (1)."""
    types = c.raw("mlp_layer_types")
    if types not in (MISSING, None):
        if (not isinstance(types, list) or len(types) != layers
                or any(t not in ("dense", "sparse") for t in types)):
            raise c.error(f"field 'mlp_layer_types' must list {layers} of 'dense' or 'sparse'")
        return [t == "sparse" for t in types]
    first = c.opt_int("first_k_dense_replace", 1)
    return [i >= first for i in range(layers)]


def kimi_linear(c: Config) -> dict:
    """Kimi Linear: Kimi Delta Attention on 3 of 4 layers, MLA (NoPE) on the rest
    (layer_types or linear_attn_config); DeepSeek-style routed and shared experts after
    the first dense layer."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    sub = _kimi_linear_config(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.opt_int("kv_lora_rank", 512) or 512,
                 rope_dim=c.opt_int("qk_rope_head_dim", 64) or 0,
                 nope_dim=c.opt_int("qk_nope_head_dim", 128) or 0,
                 v_dim=c.opt_int("v_head_dim", 128) or 128,
                 q_lora_rank=c.opt_int("q_lora_rank", 0) or 0, bias=bias)
    kda = KimiDelta(heads=_sub_int(c, sub, "num_heads", "linear_num_heads", 32),
                    head_dim=_sub_int(c, sub, "head_dim", "linear_head_dim", 128),
                    conv_kernel=_sub_int(c, sub, "short_conv_kernel_size",
                                         "linear_conv_kernel_dim", 4))
    kinds = _kimi_layer_kinds(c, layers, sub)
    expert_ff = c.opt_int("moe_intermediate_size", 1024) or 1
    # KimiLinearConfig's attribute_map: config.json holds num_experts, num_shared_experts,
    # num_experts_per_token and model_max_length (the usual names are aliases)
    shared = c.opt_int("num_shared_experts", 1, "n_shared_experts") or 0
    moe = MoE(experts=c.opt_int("num_experts", 256, "num_local_experts") or 1,
              active=c.opt_int("num_experts_per_token", 8, "num_experts_per_tok") or 1,
              expert_d_ff=expert_ff,
              shared_experts=shared, shared_d_ff=expert_ff)
    sparse = _kimi_sparse(c, layers)
    kv_heads = 1  # the latent is shared by every head
    fields = flat_fields(hidden, layers, heads, kv_heads, mla.kv_lora_rank, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("model_max_length", 1048576,
                                               "max_position_embeddings") or 0,
                         notes=["hybrid: Kimi Delta Attention layers hold a constant state; "
                                "MLA layers cache one latent per token"])
    return with_runs(fields, [Layer(mla if k == "full" else kda, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "kimi_linear": kimi_linear,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
