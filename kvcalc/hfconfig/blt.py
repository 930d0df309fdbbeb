"""The Byte Latent Transformer (blt; arXiv:2412.09871), as transformers 5.24 builds
BltForCausalLM (`modeling_blt.py`, `configuration_blt.py`): a local encoder over bytes, a
global transformer over patches of bytes, a local decoder over bytes, and the entropy
model (`patcher`) that draws the patch boundaries.

The caches are the local stacks' (kvcalc.layers.bytes): each encoder and decoder layer
keeps every byte's K/V, so the cache is a function of the byte count alone, whatever the
patching; the global transformer, the byte-patch cross-attention and the patcher are run
again at every step on what they are given and cache nothing. kvcalc's layers are the
encoder's and the decoder's (one width, the decoder's: a model whose local stacks differ
in width is refused); the rest is counted in extra_params, and the hashed n-gram
embedding table as a second lookup table (per_layer_rows x per_layer_width), of which a
step reads its bytes' rows.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, describe, flat_fields, with_runs
from kvcalc.layers import Dense, Layer
from kvcalc.layers.bytes import ByteAttention


# Each sub-config class's defaults (transformers 5.24, configuration_blt.py), which an
# absent sub-config or field takes: hidden_size, heads, layers, intermediate_size (None:
# int(8 x hidden_size / 3)).
_SUB_DEFAULTS = {
    "encoder_config": (1024, 16, 1, None),
    "decoder_config": (1024, 16, 9, 2816),
    "global_config": (2048, 16, 25, 5632),
    "patcher_config": (768, 12, 14, 2048),
}


_HASH_GROUPS = [3, 4, 5, 6, 7, 8]  # BltConfig: encoder_hash_byte_group_size None -> these


class _Stack:
    """One sub-config's transformer stack, read with its class's defaults."""

    def __init__(self, c: Config, key: str) -> None:
        sub = c.raw(key)
        if sub is MISSING or sub is None:
            sub = {}  # the sub-config class's defaults
        elif not isinstance(sub, dict):
            raise c.error(f"field {key!r} must be an object, got {describe(sub)}")
        self.c = c.over(sub, f"{c.where} ({key})")
        hidden, heads, layers, d_ff = _SUB_DEFAULTS[key]
        self.hidden = self.c.opt_int("hidden_size", hidden)
        self.heads = self.c.opt_int("num_attention_heads", heads)
        self.kv_heads = self.c.opt_int("num_key_value_heads", None) or self.heads
        self.layers = self.c.opt_int("num_hidden_layers", layers)
        self.d_ff = self.c.opt_int("intermediate_size", d_ff) or int(8 * self.hidden / 3)
        self.head_dim = self.hidden // self.heads  # BltSelfAttention: hidden_size // heads
        for name, value in (("hidden_size", self.hidden), ("num_attention_heads", self.heads),
                            ("num_key_value_heads", self.kv_heads),
                            ("intermediate_size", self.d_ff)):
            if value <= 0:
                raise self.c.error(f"field {name!r} must be positive, got {value}")
        if self.layers < 0:
            raise self.c.error(f"field 'num_hidden_layers' must be >= 0, got {self.layers}")

    def attention_params(self) -> int:
        """q, k, v, o, bias-free."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 2 * h * q + 2 * h * kv

    def layer_params(self) -> int:
        """BltTransformerLayer: attention, a gated MLP, two RMSNorms."""
        return self.attention_params() + 3 * self.hidden * self.d_ff + 2 * self.hidden

    def cross_params(self) -> int:
        """BltCrossAttention: q, k, v, o and RMSNorms on its query and key inputs."""
        return self.attention_params() + 2 * self.hidden

    def attention(self) -> ByteAttention:
        return ByteAttention(self.heads, self.kv_heads, self.head_dim)


def blt(c: Config) -> dict:
    """The Byte Latent Transformer: a local encoder and decoder over bytes (each layer
    keeping every byte's K/V) around a global transformer over entropy-drawn patches; the
    global transformer, byte-patch cross-attention, patcher and hashed n-gram embeddings
    cache nothing (their parameters counted)."""
    enc, dec = _Stack(c, "encoder_config"), _Stack(c, "decoder_config")
    glob, patcher = _Stack(c, "global_config"), _Stack(c, "patcher_config")
    if enc.hidden != dec.hidden:
        raise c.error(f"a local encoder {enc.hidden} wide beside a local decoder "
                      f"{dec.hidden} wide is not supported (kvcalc's layers share one width)")
    d, vocab = dec.hidden, c.req_dim("vocab_size")
    enc_vocab = enc.c.opt_int("vocab_size", 260)
    enc_k, dec_k = enc.c.opt_int("cross_attn_k", 2), dec.c.opt_int("cross_attn_k", 2)
    # local encoder: its byte -> patch projection and cross-attention (after every layer,
    # or once), beside its own embedding table's rows past the lm_head's vocabulary
    encoder = (d * d * enc_k
               + (enc.layers if enc.c.opt_bool("cross_attn_all_layers", False) else 1)
               * enc.cross_params() + (enc_vocab - vocab) * d)
    # global transformer: its layers, and a projection in when the encoder's patch output
    # (hidden_size x the top-level cross_attn_k) is not its width (BltConfig.__post_init__)
    patch_out = enc.hidden * (c.opt_int("cross_attn_k", 2) or 1)
    global_ = glob.layers * glob.layer_params() + (
        patch_out * glob.hidden if patch_out != glob.hidden else 0)
    # local decoder: patch -> byte projection and cross-attention (before every layer, or
    # the first)
    decoder = (dec.c.opt_int("hidden_size_global", 2048) * d * dec_k
               + (dec.layers if dec.c.opt_bool("cross_attn_all_layers", True) else 1)
               * dec.cross_params())
    # the entropy model, built when patch_in_forward: layers, embedding, norm, lm_head
    patcher_params = 0
    if c.opt_bool("patch_in_forward", True):
        rows = patcher.c.opt_int("vocab_size", 260)
        patcher_params = (patcher.layers * patcher.layer_params() + 2 * rows * patcher.hidden
                          + patcher.hidden)
    groups = c.raw("encoder_hash_byte_group_size")
    groups = _HASH_GROUPS if not isinstance(groups, list) or not groups else groups
    hash_rows = (c.opt_int("encoder_hash_byte_group_vocab", 500002)
                 * c.opt_int("encoder_hash_byte_group_nb_functions", 1) * len(groups))
    layer_list = ([Layer(enc.attention(), Dense(enc.d_ff), 2)] * enc.layers
                  + [Layer(dec.attention(), Dense(dec.d_ff), 2)] * dec.layers)
    fields = flat_fields(d, enc.layers + dec.layers, dec.heads, dec.kv_heads, dec.head_dim,
                         dec.d_ff, vocab, extra_params=encoder + global_ + decoder + patcher_params,
                         per_layer_rows=hash_rows, per_layer_width=enc.hidden,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                         notes=[f"{enc.layers} local encoder then {dec.layers} local decoder "
                                "layers, each keeping every byte's K/V (as transformers 5.24 "
                                "does, though their mask slides); the global transformer "
                                f"({glob.layers} layers over patches), cross-attention, "
                                f"patcher and projections ({global_ + encoder + decoder + patcher_params:,} "
                                "parameters) cache nothing and are in extra_params, their "
                                "FLOPs not counted; the hashed n-gram embeddings "
                                f"({hash_rows:,} rows) as a lookup table"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "blt": blt,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
