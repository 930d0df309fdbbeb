"""A model's layers built from its flat description (kvcalc.spec.ModelSpec.uniform): the
spec's heads, d_ff, ... and its Recipe (windows, latent attention, experts). The flat
fields are read here, and only here: every figure is then read from the layers built."""

from __future__ import annotations

import dataclasses
from itertools import groupby

from kvcalc.ground.dtypes import MAX_WIDTH, check_size
from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention, CrossAttention, Dense, Layer, Run


def check_recipe(spec, r) -> None:
    if r.global_every and not r.sliding_window:
        raise KvcalcError("global_every needs a sliding_window")
    if r.moe is not None and not 0 <= r.dense_layers <= spec.layers:
        raise KvcalcError("moe.dense_layers must be between 0 and layers")
    if r.mla is not None:
        m = r.mla
        for name, v in (("kv_lora_rank", m.kv_lora_rank), ("qk_rope_head_dim", m.rope_dim),
                        ("qk_nope_head_dim", m.nope_dim), ("v_head_dim", m.v_dim),
                        ("q_lora_rank", m.q_lora_rank)):
            if name == "q_lora_rank" and v == 0:
                continue  # full-rank queries
            check_size(f"mla.{name}", v, MAX_WIDTH)
        if m.heads != spec.heads:
            raise KvcalcError(f"mla has {m.heads} heads, the model {spec.heads}")


def _flat_attention(spec) -> Attention:
    """Full attention of the flat fields' shape."""
    return Attention(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim,
                     v_head_dim=spec.v_head_dim, qkv_bias=spec.qkv_bias,
                     out_bias=spec.out_bias, qk_norm=2 * spec.head_dim if spec.qk_norm else 0)


def uniform_runs(spec, r) -> tuple:
    """Runs from the flat fields and the recipe: MoE after `dense_layers` dense layers; a
    sliding window on every layer, or on all but every `global_every`-th (layer i is
    global when (i + 1) % global_every == 0)."""
    full = _flat_attention(spec) if r.mla is None else r.mla
    slides = bool(r.sliding_window) and r.mla is None
    sliding = dataclasses.replace(full, kind="sliding", window=r.sliding_window) if slides else full
    # An encoder-decoder's decoder layers cross-attend too, behind a norm of their own.
    cross = _cross_attention(spec)
    norms = spec.norms_per_layer + (cross is not None)
    dense = Dense(spec.d_ff, spec.mlp == "gated", spec.mlp_bias)
    mlps = [dense] * spec.layers
    if r.moe is not None:
        mlps = [dense] * r.dense_layers + [r.moe] * (spec.layers - r.dense_layers)
    every = r.global_every
    mixers = [sliding if slides and not (every and (i + 1) % every == 0) else full
              for i in range(spec.layers)]
    # Equal neighbours are the same objects here: group them before making Layers.
    return tuple(Run(Layer(mx, mlp, norms, cross), sum(1 for _ in same))
                 for (mx, mlp), same in groupby(zip(mixers, mlps)))


def _cross_attention(spec) -> CrossAttention | None:
    """T5's cross-attention: the flat fields' heads over the encoder's output."""
    if not spec.encoder_layers:
        return None
    return CrossAttention(heads=spec.heads, kv_heads=spec.kv_heads, head_dim=spec.head_dim,
                          v_head_dim=spec.v_head_dim, qkv_bias=spec.qkv_bias,
                          out_bias=spec.out_bias, qk_norm=2 * spec.head_dim if spec.qk_norm else 0)


def encoder_runs(spec) -> tuple:
    """T5's encoder stack, as runs of layers: its decoder's first layer's self-attention
    (bidirectional) and MLP, without the cross-attention; () for a decoder-only model."""
    if not spec.encoder_layers:
        return ()
    first = spec.runs[0].layer
    return (Run(Layer(first.mixer, first.mlp, spec.norms_per_layer), spec.encoder_layers),)
