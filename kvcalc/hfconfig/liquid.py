"""Liquid AI's LFM2, LFM2-MoE and LFM3: short convolutions beside attention layers.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds, lfm2_full_attn_idxs
from kvcalc.layers import Attention, Dense, Layer, MoE, ShortConv
from kvcalc.layers.state import Lfm3ShortConv


def lfm2_ff_dim(c: Config) -> int:
    """LFM2's SwiGLU width as Lfm2MLP builds it (transformers 5.24, modeling_lfm2.py).

    The base width is `block_ff_dim` when the config has it (Lfm2Config pops that legacy
    name over `intermediate_size`: LiquidAI's published LFM2-350M ... 2.6B configs state only
    `block_ff_dim`), else `intermediate_size`. With `block_auto_adjust_ff_dim` (default
    true) it becomes int(2 x width / 3); a `block_ffn_dim_multiplier` that is not null
    (default 1.0) then multiplies it and it is rounded up to `block_multiple_of` (default
    256). A null multiplier leaves int(2 x width / 3) unrounded, as Lfm2MLP does."""
    key = "block_ff_dim" if c.has("block_ff_dim") else "intermediate_size"
    if not c.has("block_ff_dim") and not c.has("intermediate_size"):
        raise c.missing("intermediate_size", " (or its legacy name 'block_ff_dim')")
    d_ff = c.req_dim(key)
    if not c.opt_bool("block_auto_adjust_ff_dim", True):
        return d_ff
    d_ff = int(2 * d_ff / 3)
    mult = c.raw("block_ffn_dim_multiplier")
    if mult is None:
        return d_ff
    if mult is MISSING:
        mult = 1.0
    if isinstance(mult, bool) or not isinstance(mult, (int, float)):
        raise c.error(f"field 'block_ffn_dim_multiplier' must be a number or null, got "
                      f"{describe(mult)}")
    d_ff = int(mult * d_ff)
    step = c.opt_int("block_multiple_of", 256)
    if not step or step < 0:
        raise c.error(f"field 'block_multiple_of' must be positive, got {step}")
    return step * -(-d_ff // step)


def lfm2(c: Config) -> dict:
    """LFM2: gated short-convolution layers and GQA attention layers (layer_types or
    full_attn_idxs); SwiGLU width auto-adjusted as Lfm2MLP does (lfm2_ff_dim, which reads
    the legacy `block_ff_dim`); q/k LayerNorms. `tie_embedding`, Lfm2Config's legacy name,
    wins over `tie_word_embeddings` when present, as the class pops it."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = lfm2_ff_dim(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    kinds = layer_kinds(c, layers, {"full_attention": "full", "conv": "conv"},
                        lambda: lfm2_full_attn_idxs(c, layers))
    conv = ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 3) or 3,
                     bias=c.opt_bool("conv_bias", False))
    attn = Attention(heads, kv_heads, head_dim, qk_norm=2 * head_dim)
    tied = (c.opt_bool("tie_embedding", True) if c.has("tie_embedding")
            else c.opt_bool("tie_word_embeddings", True))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=tied,
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state"])
    return with_runs(fields, [Layer(attn if k == "full" else conv, Dense(d_ff), 2)
                              for k in kinds])


def lfm3(c: Config) -> dict:
    """LFM3: LFM2's short convolutions beside sliding and global attention layers (layer
    i % 4 == 2 global, the other multiples of 4 sliding), Qwen3's attention with a
    sigmoid gate per head, a plain SwiGLU, post-mixer and post-MLP norms."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    kinds = layer_kinds(c, layers, {"full_attention": "full", "sliding_attention": "sliding",
                                    "conv": "conv"},
                        lambda: ["full" if i % 4 == 2 else "sliding" if i % 4 == 0 and i else
                                 "conv" for i in range(layers)])
    # Lfm3Config: sliding_window null makes a sliding layer attend in full
    window = c.opt_int("sliding_window", 0) or 0
    bias = c.opt_bool("attention_bias", False)
    gate = c.opt_bool("use_attention_gate", True)
    norms = 4 if c.opt_bool("use_sandwich_norm", True) else 2
    conv = Lfm3ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 7) or 7,
                         bias=c.opt_bool("conv_bias", False))

    def mixer(kind: str):
        if kind == "conv":
            return conv
        kind = kind if window else "full"
        return Attention(heads, kv_heads, head_dim, kind=kind,
                         window=window if kind == "sliding" else 0, qkv_bias=bias,
                         out_bias=bias, qk_norm=2 * head_dim, head_gate=gate)

    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True, norms_per_layer=norms,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state; "
                                "vLLM serves no LFM3 (no engine count)"])
    return with_runs(fields, [Layer(mixer(k), Dense(d_ff), norms) for k in kinds])


def lfm2_moe(c: Config) -> dict:
    """LFM2-MoE: LFM2's short-convolution and GQA layers (layer_types, required), dense
    gated MLPs on the first num_dense_layers, routed experts after."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.opt_int("num_attention_heads", 32) or 32
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("intermediate_size")
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = hidden // heads

    def required() -> list[str]:
        raise c.missing("layer_types", " (LFM2-MoE names each layer conv or full_attention)")
    kinds = layer_kinds(c, layers, {"full_attention": "full", "conv": "conv"}, required)
    conv = ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 3) or 3,
                     bias=c.opt_bool("conv_bias", False))
    attn = Attention(heads, kv_heads, head_dim, qk_norm=2 * head_dim)
    dense = c.opt_int("num_dense_layers", 2) or 0
    moe = MoE(experts=c.opt_int("num_experts", 32) or 1,
              active=c.opt_int("num_experts_per_tok", 4) or 1,
              expert_d_ff=c.opt_int("moe_intermediate_size", 1792) or 1)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state"])
    return with_runs(fields, [Layer(attn if k == "full" else conv,
                                    Dense(d_ff) if i < dense else moe, 2)
                              for i, k in enumerate(kinds)])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "lfm2": lfm2, "lfm2_moe": lfm2_moe, "lfm3": lfm3,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "lfm2": {"num_key_value_heads": 8},
    "lfm3": {"num_key_value_heads": 4, "head_dim": 128, "sliding_window": 256},
}
