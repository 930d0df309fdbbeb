"""Zyphra's models: Zamba and Zamba2, and ZAYA1 (zaya: compressed convolutional
attention, kvcalc.layers.cca).

Zamba and Zamba2 (transformers 5.24 `models/zamba`, `models/zamba2`): Mamba layers,
some of which ("hybrid" in `layers_block_type`) first run a transformer block whose
weights are shared.

Each layer is a Mamba mixer after one RMSNorm (Zamba: multi-head Mamba-1, its per-head
x_proj and dt_proj the same counts as Mamba-1's; Zamba2: Mamba-2 with a gated norm and a
biased convolution whatever `use_conv_bias` says; vLLM 0.32 serves Zamba2 and not Zamba,
whose state is therefore not paged: kvcalc.layers.state.ZambaMamba). A hybrid layer also runs the shared
block (kvcalc.layers.shared.SharedBlock: attention over the hidden state concatenated with
the embedding, 2 x hidden wide, heads of 2 x hidden / heads, then a gated MLP) and its own
hidden x hidden linear. The block's weights exist `num_mem_blocks` times (Zamba: once),
cycled over the hybrid layers and tied, so the parameters count them once each; every
use caches its own K/V (transformers' "hybrid" cache layer holds both the Mamba state and
the attention's K/V). Zamba2 adds to each use an MLP adapter (hidden -> adapter_rank ->
2 x intermediate) and, with `use_shared_attention_adapter`, q/k/v adapters.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from kvcalc.hfconfig.config import Config, flat_fields, required_window, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Layer, MoE
from kvcalc.layers.cca import ConvolvedAttention
from kvcalc.layers.shared import SharedBlock
from kvcalc.layers.state import Mamba2, ZambaMamba


_BLOCK_TYPES = {"linear_attention": "mamba", "mamba": "mamba", "hybrid": "hybrid"}


def _zamba_default_pattern(c: Config, layers: int) -> list[str]:
    """ZambaConfig: two Mamba layers, a hybrid one, then a hybrid layer wherever
    i % attn_layer_period == attn_layer_offset over the rest."""
    period = c.opt_int("attn_layer_period", 6) or 6
    offset = c.opt_int("attn_layer_offset", 4) or 0
    rest = ["hybrid" if i % period == offset else "mamba" for i in range(layers - 3)]
    return (["mamba", "mamba", "hybrid"] + rest)[:layers]


def _zamba2_default_pattern(layers: int) -> list[str]:
    """Zamba2Config's pattern for its default 54 layers (Zamba2-2.7B's)."""
    return (["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"]
            + ["mamba"] * 3 + ["hybrid"] + ["mamba"] * 2)


def _kinds(c: Config, layers: int) -> list[str]:
    raw = c.raw("layers_block_type", "layer_types")
    if isinstance(raw, list):
        unknown = sorted({t for t in raw if t not in _BLOCK_TYPES})
        if unknown:
            raise c.error(f"layers_block_type has entries kvcalc does not know for model_type "
                          f"{c.model_type!r}: {unknown}")
        if len(raw) != layers:
            raise c.error(f"layers_block_type lists {len(raw)} layers, not "
                          f"num_hidden_layers={layers}")
        return [_BLOCK_TYPES[t] for t in raw]
    if c.model_type == "zamba":
        return _zamba_default_pattern(c, layers)
    kinds = _zamba2_default_pattern(layers)
    if len(kinds) != layers:
        raise c.missing("layers_block_type", f" (the class's default pattern is for 54 "
                                             f"layers, not {layers})")
    return kinds


def zamba(c: Config) -> dict:
    """Zamba and Zamba2: Mamba (Zamba2: Mamba-2) layers, the hybrid ones also running one
    of `num_mem_blocks` shared attention + MLP blocks (weights counted once, a K/V cache
    per use)."""
    two = c.model_type == "zamba2"
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    heads = c.opt_int("num_attention_heads", 32 if two else 16) or 1
    kv_default = heads if two else 16
    kv_heads = c.opt_int("num_key_value_heads", kv_default) or heads
    d_ff = c.opt_int("intermediate_size", None) or (4 * hidden if two else 14848)
    expand = c.opt_int("mamba_expand", 2) or 2
    d_state = c.opt_int("mamba_d_state", 64 if two else 16) or 0
    d_conv = c.opt_int("mamba_d_conv", 4) or 4
    if two:
        attn_in = 2 * hidden  # Zamba2Config.__post_init__ sets both, whatever is given
        head_dim = 2 * hidden // heads
        m_heads = c.opt_int("n_mamba_heads", 8) or 8
        mixer = Mamba2(heads=m_heads, head_dim=expand * hidden // m_heads, d_state=d_state,
                       groups=c.opt_int("mamba_ngroups", 1) or 1, conv_kernel=d_conv,
                       conv_bias=True, proj_bias=c.opt_bool("add_bias_linear", False))
        mem_blocks = c.opt_int("num_mem_blocks", 1) or 1
        rank = c.opt_int("adapter_rank", 128) or 0
        attn_adapters = c.opt_bool("use_shared_attention_adapter", False)
        mlp_bias = c.opt_bool("add_bias_linear", False)
        context = 16384 if c.opt_bool("use_long_context", False) else (
            c.opt_int("max_position_embeddings", 4096) or 0)
    else:
        attn_in = c.opt_int("attention_hidden_size", None) or 2 * hidden
        head_dim = c.opt_int("attention_head_dim", None) or 2 * hidden // heads
        dt_rank = c.raw("mamba_dt_rank")
        dt_rank = (math.ceil(hidden / 16) if dt_rank in ("auto", None) or not
                   isinstance(dt_rank, int) else c.check_int("mamba_dt_rank", dt_rank))
        mixer = ZambaMamba(d_inner=expand * hidden, d_state=d_state, d_conv=d_conv,
                      dt_rank=dt_rank, conv_bias=c.opt_bool("mamba_conv_bias", True),
                      proj_bias=c.opt_bool("mamba_proj_bias", False))
        mem_blocks, rank, attn_adapters, mlp_bias = 1, 0, False, False
        context = c.opt_int("max_position_embeddings", 4096) or 0
    kinds = _kinds(c, layers)
    layer_list, uses = [], 0
    for kind in kinds:
        if kind == "mamba":
            layer_list.append(Layer(mixer, None, 1))
            continue
        block = SharedBlock(heads=heads, kv_heads=kv_heads, head_dim=head_dim, d_ff=d_ff,
                            mlp_bias=mlp_bias, attn_in=attn_in, owner=uses < mem_blocks,
                            adapter_rank=rank, attention_adapters=attn_adapters)
        uses += 1
        layer_list.append(Layer(block, None, 1, beside=mixer))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=context,
                         notes=[f"{uses} hybrid layers share {min(mem_blocks, uses)} "
                                "attention + MLP block(s): their weights counted once, "
                                "a K/V cache per use"])
    return with_runs(fields, layer_list)


def zaya(c: Config) -> dict:
    """ZAYA1: compressed convolutional attention (CCA: q/k convolved over time, values half
    delayed a token) on every layer, full or sliding (layer_types "hybrid", "hybrid_sliding");
    num_experts SwiGLU experts, top 1 (or a skip expert), routed by an MLP that carries its
    state from layer to layer; learned scales and biases on each residual."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in ("hidden_size", "num_hidden_layers",
                                                           "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.req_dim("head_dim")
    kinds = layer_kinds(c, layers, {"hybrid": "full", "hybrid_sliding": "sliding"},
                        lambda: ["full"] * layers)
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    experts = c.req_dim("num_experts")
    rank = c.req_dim("router_hidden_size")
    # ZayaRouter: its down projection (d_model -> router_hidden_size) is MoE's router; the
    # rest apart: that projection's bias, the carried state's scale (not on layer 0), and
    # ZayaRouterMLP (a norm, two biased rank x rank layers, rank -> experts + skip)
    router_rest = rank + rank + 2 * (rank * rank + rank) + rank * (experts + 1)
    moe = MoE(experts=experts, active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=c.req_dim("moe_intermediate_size"), router_width=rank)
    extra = (layers * (router_rest + 8 * hidden)  # and the residual scalings' 2 x 4 vectors
             + (layers - 1) * rank  # router_states_scale
             + 2 * hidden  # input_hidden_states_scale and _bias
             + (vocab if c.opt_bool("lm_head_bias", False) else 0))
    t0, t1 = (c.opt_int(k, 2) or 2 for k in ("cca_time0", "cca_time1"))
    layer_list = [Layer(ConvolvedAttention(heads, kv_heads, head_dim, kind=k,
                                           window=window if k == "sliding" else 0,
                                           qkv_bias=bias, out_bias=bias, conv_time0=t0,
                                           conv_time1=t1), moe, 2) for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, moe.expert_d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=["the router MLP past its first projection, the residual "
                                "scalings and the input scaling (extra_params); vLLM serves "
                                "no ZAYA (no engine count)"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "zamba": zamba, "zamba2": zamba, "zaya": zaya,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "zaya": {"head_dim": 128, "num_key_value_heads": 2, "num_experts": 16,
             "num_experts_per_tok": 1, "moe_intermediate_size": 2048, "router_hidden_size": 256},
}
