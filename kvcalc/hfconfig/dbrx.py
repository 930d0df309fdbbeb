"""Databricks' DBRX: experts on every layer, its sizes in nested attn_config and
ffn_config.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, attention, describe, flat_fields, with_runs
from kvcalc.layers import Layer, MoE


def _sub(c: Config, key: str) -> Config:
    """A nested config (DBRX's attn_config, ffn_config), read with the same checks."""
    value = c.raw(key)
    if value is MISSING or value is None:
        value = {}  # the class's own defaults
    if not isinstance(value, dict):
        raise c.error(f"field {key!r} must be an object, got {describe(value)}")
    return c.over(value, f"{c.where}: {key}")


def dbrx(c: Config) -> dict:
    """DBRX: fused Wqkv without biases, bias-free LayerNorms, every layer experts
    (ffn_config) of gated w1/v1/w2; K/V heads in attn_config."""
    hidden = c.req_dim("d_model")
    layers = c.req_dim("n_layers")
    heads = c.req_dim("n_heads")
    vocab = c.req_dim("vocab_size")
    attn_cfg, ffn_cfg = (_sub(c, key) for key in ("attn_config", "ffn_config"))
    # DbrxAttentionConfig / DbrxFFNConfig defaults: one K/V head, 4 experts, top 1, 3584.
    kv_heads = attn_cfg.opt_int("kv_n_heads", 1) or 1
    d_ff = ffn_cfg.opt_int("ffn_hidden_size", 3584) or 3584
    moe = MoE(experts=ffn_cfg.opt_int("moe_num_experts", 4) or 4,
              active=ffn_cfg.opt_int("moe_top_k", 1) or 1, expert_d_ff=d_ff)
    if hidden % heads:
        raise c.error(f"d_model ({hidden}) is not divisible by n_heads ({heads})")
    head_dim = hidden // heads
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    max_len = c.opt_int("max_seq_len", 2048) or 0
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=max_len, notes=[])
    return with_runs(fields, [Layer(attn, moe, 2)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "dbrx": dbrx,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
