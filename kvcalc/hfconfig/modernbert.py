"""ModernBERT's decoder (modernbert-decoder, the Ettin decoders): a causal decoder in
ModernBERT's shape, read as ModernBertDecoderConfig and ModernBertDecoderForCausalLM in
transformers 5.24 build it.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, attention, core_dims, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import Dense, Layer


def modernbert_decoder(c: Config) -> dict:
    """ModernBERT decoder: multi-head attention (head_dim is hidden_size / heads), a
    global layer every global_attn_every_n_layers (3) from the first, the others sliding
    over sliding_window (absent: local_attention / 2) tokens; a GeGLU MLP; LayerNorms (biased when norm_bias) after
    the embedding and before attention and MLP (none before the first layer's attention);
    the head's dense layer and norm, then the tied output projection with its bias."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    if hidden % heads:
        raise c.error(f"hidden_size ({hidden}) is not divisible by num_attention_heads "
                      f"({heads})")
    head_dim = hidden // heads  # ModernBertDecoderAttention reads no head_dim field
    every = c.opt_int("global_attn_every_n_layers", 3) or 3
    kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                        lambda: ["full" if i % every == 0 else "sliding" for i in range(layers)])
    # ModernBertDecoderConfig: sliding_window as config.json states it (a saved config
    # does), else local_attention // 2
    window = c.opt_int("sliding_window", None)
    if window is None:
        window = (c.opt_int("local_attention", 128) or 0) // 2
    if "sliding" in kinds and window <= 0:
        raise c.error("field 'sliding_window' (or 'local_attention' / 2) must be positive: "
                      "the model has windowed layers")
    bias = c.opt_bool("attention_bias", False)
    mlp = Dense(d_ff, gated=True, bias=c.opt_bool("mlp_bias", False))
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias), mlp, 1 if i == 0 else 2)
                  for i, k in enumerate(kinds)]
    norm_bias = c.opt_bool("norm_bias", False)
    head = (hidden * hidden + (hidden if c.opt_bool("classifier_bias", False) else 0)
            + hidden * (2 if norm_bias else 1))
    output_bias = vocab if c.opt_bool("decoder_bias", True) else 0
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, mlp_bias=mlp.bias,
                         norm="layernorm", norm_bias=norm_bias, embedding_norm=True,
                         extra_params=head + output_bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["the prediction head's dense layer and LayerNorm, and the "
                                "output projection's bias (extra_params)"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "modernbert-decoder": modernbert_decoder,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
