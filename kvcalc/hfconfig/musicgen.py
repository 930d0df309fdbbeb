"""Decoders over audio codes: MusicGen's and MusicGen Melody's (musicgen_decoder,
musicgen_melody_decoder; their composite configs, musicgen and musicgen_melody, are read
through kvcalc.hfconfig.multimodal, the decoder being `decoder`).

Each is read as transformers 5.24 builds MusicgenForCausalLM / MusicgenMelodyForCausalLM
(`modeling_musicgen*.py`): one embedding table of vocab_size + 1 rows and one bias-free
lm_head per codebook, sinusoidal positions (a buffer), pre-LayerNorm layers with bias-free
attention and a bias-free GELU MLP (fc1, fc2), a final LayerNorm.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, flat_fields, with_runs
from kvcalc.layers import Dense, Layer
from kvcalc.layers.audio import AudioAttention, AudioCrossAttention


def _codebook_decoder(c: Config, cross: bool) -> dict:
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    d_ff = c.req_dim("ffn_dim")
    codebooks = c.opt_int("num_codebooks", 4) or 1
    head_dim = hidden // heads  # MusicgenAttention: embed_dim // num_heads
    attn = AudioAttention(heads, heads, head_dim)
    # encoder_attn is built in every layer, with its LayerNorm, whether or not a text
    # encoder's states come (MusicgenDecoderLayer)
    layer = (Layer(attn, Dense(d_ff, gated=False), 3,
                   cross=AudioCrossAttention(heads, heads, head_dim)) if cross
             else Layer(attn, Dense(d_ff, gated=False), 2))
    # The codebooks' tables and heads side by side: vocab is codebooks x vocab_size (the
    # logits one decode step makes); each table has one more row (the pad/bos code).
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff,
                         codebooks * c.req_dim("vocab_size"), mlp="plain",
                         norm="layernorm", norm_bias=True, norms_per_layer=layer.norms,
                         extra_params=codebooks * hidden,
                         tied_embeddings=False,  # a ModuleList each: transformers ties none
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=[f"{codebooks} codebooks: vocab is codebooks x vocab_size (one "
                                "embedding table and lm_head each), each table one row more "
                                "(extra_params); a position is one audio frame (generating N "
                                "frames takes N + codebooks - 1 steps, the delay pattern); "
                                "generate() with guidance_scale > 1 runs two sequences a "
                                "prompt (give twice the batch)"])
    if cross:
        fields["notes"].append("every layer keeps the text encoder's K/V (cross-attention), "
                               "counted at seq_len tokens")
    else:
        fields["notes"].append("the conditioning (text and chroma) is prepended: seq_len "
                               "counts it")
    return with_runs(fields, [layer] * layers)


def musicgen_decoder(c: Config) -> dict:
    """MusicGen's decoder: one embedding table and lm_head per audio codebook, bias-free
    attention and GELU MLP, LayerNorms; every layer cross-attends to the text encoder (T5)
    and keeps its tokens' K/V."""
    return _codebook_decoder(c, cross=True)


def musicgen_melody_decoder(c: Config) -> dict:
    """MusicGen Melody's decoder: MusicGen's without cross-attention, its conditioning
    (text encoder and chroma) prepended to the audio frames."""
    return _codebook_decoder(c, cross=False)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "musicgen_decoder": musicgen_decoder, "musicgen_melody_decoder": musicgen_melody_decoder,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
