"""xLSTM: mLSTM layers (kvcalc.layers.state.MLSTM), no attention.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, flat_fields, with_runs
from kvcalc.layers import MLSTM, Dense, Layer


def _factor(c: Config, key: str, default: float) -> float:
    """A positive width factor (xLSTM's qk_dim_factor, ...): a number, not only an int."""
    value = c.raw(key)
    if value is MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 64:
        raise c.error(f"field {key!r} must be a positive number, got {value!r}")
    return value


def xlstm(c: Config) -> dict:
    """xLSTM (xLSTM 7B): every block an mLSTM layer and a gated MLP, each after an RMSNorm."""
    hidden = c.req_dim("hidden_size", "embedding_dim")
    layers = c.req_dim("num_hidden_layers", "num_blocks")
    vocab = c.req_dim("vocab_size")
    heads = c.opt_int("num_heads", 8) or 8
    bias = c.opt_bool("use_bias", False)
    # xLSTMLayer sizes q/k and v as int(hidden x factor) (the config's rounded qk_dim is
    # only the empty cache's shape, replaced by the layer's own states)
    qk = int(hidden * _factor(c, "qk_dim_factor", 0.5))
    v = int(hidden * _factor(c, "v_dim_factor", 1.0))
    multiple = c.opt_int("ffn_round_up_to_multiple_of", 64) or 64
    # xLSTMConfig.round_up_to_next_multiple_of, float arithmetic and all
    up = int(((hidden * _factor(c, "ffn_proj_factor", 2.667) + multiple - 1) // multiple)
             * multiple)
    if qk % heads or v % heads:
        raise c.error(f"num_heads ({heads}) must divide the q/k width {qk} and the value "
                      f"width {v}")
    mixer = MLSTM(heads=heads, qk_head_dim=qk // heads, v_head_dim=v // heads, bias=bias)
    notes = ["recurrent model (xLSTM): a constant state per sequence, no KV cache"]
    if bias:
        notes.append("use_bias: its RMSNorms have biases (counted as LayerNorms' weight "
                     "and bias)")
    fields = flat_fields(hidden, layers, heads, heads, qk // heads, up, vocab,
                         norm="layernorm" if bias else "rmsnorm", norm_bias=bias,
                         final_norm=c.opt_bool("add_out_norm", True),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         notes=notes)
    return with_runs(fields, [Layer(mixer, Dense(up, gated=True, bias=bias), 2)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "xlstm": xlstm,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
