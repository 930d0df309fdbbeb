"""Moshi's temporal transformer (moshi).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, attention, flat_fields, with_runs
from kvcalc.layers import Dense, Layer


def moshi(c: Config) -> dict:
    """Moshi's temporal transformer (MoshiForCausalLM): Llama-shaped, bias-free, a gated MLP
    of ffn_dim / 2 (fc1 emits gate and value together), sliding_window tokens cached a
    layer, one extra embedding row. The depth
    decoder and the Mimi audio codec beside it are not counted."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("ffn_dim") // 2  # MoshiGatingMLP: fc1 d -> ffn_dim, fc2 ffn_dim / 2 -> d
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    # transformers caches each layer in a DynamicSlidingWindowLayer of sliding_window tokens
    window = c.opt_int("sliding_window", 0) or 0
    attn = attention("sliding" if window else "full", window, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         extra_params=hidden,  # embed_tokens: vocab_size + 1 rows
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 3000) or 0,
                         notes=["embed_tokens has vocab_size + 1 rows (extra_params); the "
                                "depth decoder and the Mimi codec are not counted"])
    return with_runs(fields, [Layer(attn, Dense(d_ff), 2)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "moshi": moshi,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "moshi": {"sliding_window": 3000},
}
