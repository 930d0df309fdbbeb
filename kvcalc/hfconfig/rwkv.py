"""RWKV-4: a recurrent state per layer (kvcalc.layers.state.RWKV), no attention.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, flat_fields, with_runs
from kvcalc.layers import RWKV, Dense, Layer


def rwkv(c: Config) -> dict:
    """RWKV-4: every layer a time-mixing WKV recurrence and a channel-mixing MLP, each
    after a LayerNorm; a LayerNorm on the embedding (layer 0's pre_ln) and at the end."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    width = c.opt_int("attention_hidden_size", hidden) or hidden
    d_ff = c.opt_int("intermediate_size", 4 * hidden) or 4 * hidden
    mixer = RWKV(width=width, d_model=hidden)
    fields = flat_fields(hidden, layers, 1, 1, hidden, d_ff, vocab,
                         norm="layernorm", norm_bias=True, embedding_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         notes=["recurrent model (RWKV): a constant state per sequence, no KV "
                                "cache"])
    return with_runs(fields, [Layer(mixer, Dense(d_ff, gated=False), 2)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "rwkv": rwkv,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
