"""Inkling's language models, as transformers 5.24 reads them.

Inkling (inkling_text; InklingTextConfig, modeling_inkling.py): five sliding layers to one
full by default (or local_layer_ids), the sliding ones with their own head geometry
(swa_*), every layer's attention and MLP wrapped in short convolutions
(kvcalc.layers.inkling), routed experts beside shared ones, a normed embedding and an
output head never tied to it.

Inkling 2 (inkling2_text; Inkling2TextConfig, modeling_inkling2.py) keeps that layout and
geometry and changes the layer (GatedConvAttention): gated outputs, attention sinks, scaled
query and relative-state heads, dynamic K/V convolutions on full layers, block attention
residuals, experts only (softcapped SwiGLU, no shared expert, a plain router) and an output
head of unpadded_vocab_size rows. Inkling 2 Loop (inkling2_loop_text) runs layers
loop_layer_index_start..end-1 loop_num_passes times with the same weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from kvcalc.ground.dtypes import MAX_LAYERS
from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import every_nth_full, layer_kinds
from kvcalc.layers import Layer, MoE
from kvcalc.layers.inkling import ConvAttention, GatedConvAttention, ScaledDense, SharedScoredMoE


# InklingTextConfig.attribute_map: the checkpoint's names -> the names the model reads
_ALIASES = {"sconv_kernel_size": "conv_kernel_size", "model_max_length": "max_position_embeddings",
            "num_local_experts": "n_routed_experts", "sliding_window": "sliding_window_size"}


# Inkling2TextConfig's adds the experts' width under the name the first Inkling gives its
# dense MLP
_ALIASES_2 = {**_ALIASES, "intermediate_size": "moe_intermediate_size"}


# layer_types as both Inklings name them
_KINDS = {"hybrid": "full", "hybrid_sliding": "sliding"}


def _canonical(c: Config, aliases: dict[str, str] = _ALIASES) -> Config:
    cfg = dict(c.cfg)
    for old, new in aliases.items():
        if old in cfg and new not in cfg:
            cfg[new] = cfg.pop(old)
    return c.over(cfg, c.where)


def _heads(c: Config, kind: str, heads: int) -> tuple[int, int, int]:
    """Query heads, K/V heads and head_dim: a sliding layer's own (swa_*), or the model's."""
    if kind == "sliding":
        return tuple(c.req_dim(k) for k in ("swa_num_attention_heads", "swa_num_key_value_heads",
                                            "swa_head_dim"))
    return heads, c.req_dim("num_key_value_heads"), c.req_dim("head_dim")


def _cache_note(kernel: int) -> str:
    return (f"each layer also caches its four short convolutions' last {kernel} inputs (fp32)")


def inkling_text(c: Config) -> dict:
    """Inkling: attention with relative-position logits and K/V short convolutions
    (full, or sliding with swa_* heads), two more convolutions per layer, routed +
    shared experts after dense_mlp_idx dense layers; the convolutions' inputs are cached
    beside K/V (fp32)."""
    c = _canonical(c)
    hidden, layers, heads, vocab, _ = core_dims(c)
    local = c.raw("local_layer_ids")
    if local is MISSING or local is None:
        local = [i for i in range(layers) if (i + 1) % 6]
    elif not isinstance(local, list):
        raise c.error(f"field 'local_layer_ids' must be a list, got {describe(local)}")
    kinds = layer_kinds(c, layers, _KINDS,
                        lambda: ["sliding" if i in local else "full" for i in range(layers)])
    # A checkpoint naming dense_intermediate_size gives the experts intermediate_size.
    dense_d_ff = c.opt_int("dense_intermediate_size", None)
    if dense_d_ff is None:
        dense_d_ff, expert_d_ff = c.req_dim("intermediate_size"), c.req_dim("moe_intermediate_size")
    else:
        expert_d_ff = c.req_dim("intermediate_size")
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        first = c.opt_int("dense_mlp_idx", 0) or 0
        types = ["dense" if i < first else "sparse" for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    moe = SharedScoredMoE(experts=c.req_int("n_routed_experts"),
                          active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_d_ff,
                          shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    dense = ScaledDense(dense_d_ff)
    kernel = c.req_dim("conv_kernel_size")
    d_rel = c.req_dim("d_rel")
    window = c.req_dim("sliding_window_size") if "sliding" in kinds else 0

    def attn(kind: str) -> ConvAttention:
        h, g, hd = _heads(c, kind, heads)
        extent = window if kind == "sliding" else c.req_dim("rel_extent")
        return ConvAttention(kind=kind, window=window if kind == "sliding" else 0, heads=h,
                             kv_heads=g, head_dim=hd, qk_norm=2 * hd, d_rel=d_rel,
                             rel_extent=extent, conv_kernel=kernel, block_conv_width=2 * hidden)

    layer_list = [Layer(attn(k), moe if t == "sparse" else dense, 2)
                  for k, t in zip(kinds, types)]
    full = attn("full")
    mtp = c.opt_int("num_mtp_layers", 0) or 0
    notes = [_cache_note(kernel) + "; vLLM's paging of them is not modelled"]
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) are not counted")
    fields = flat_fields(hidden, layers, heads, full.kv_heads, full.head_dim, dense_d_ff, vocab,
                         qk_norm=True, extra_params=hidden,  # the embedding's RMSNorm
                         tied_embeddings=False,  # InklingForCausalLM ties nothing
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=notes)
    return with_runs(fields, layer_list)


def _loop(c: Config, layers: int) -> tuple[int, int, int, int]:
    """Inkling 2 Loop's first and past-the-last loop layer, its passes and its message
    gates' rank: loop_config's core_start, core_end, num_passes and gate_rank where the
    checkpoint nests them (Inkling2LoopTextConfig.__post_init__ reads them first), else
    the flat loop_* fields."""
    nested = c.raw("loop_config")
    nested = nested if isinstance(nested, dict) else {}
    names = (("core_start", "loop_layer_index_start", 6), ("core_end", "loop_layer_index_end", 18),
             ("num_passes", "loop_num_passes", 3), ("gate_rank", "loop_gate_rank", 64))
    start, end, passes, rank = (
        c.check_int(f"loop_config.{inner}", nested[inner]) if inner in nested
        else c.opt_int(flat, default) for inner, flat, default in names)
    if passes < 1:
        raise c.error(f"field 'loop_num_passes' must be at least 1, got {passes}")
    if not 0 < start <= end <= layers:
        raise c.error(f"the loop layers must lie within 1..{layers} (num_hidden_layers), got "
                      f"loop_layer_index_start {start} and loop_layer_index_end {end}")
    if rank <= 0:
        raise c.error(f"field 'loop_gate_rank' must be positive, got {rank}")
    if layers + (passes - 1) * (end - start) > MAX_LAYERS:  # before any list is built
        raise c.error(f"{passes:,} passes over {end - start:,} loop layers exceed the "
                      f"{MAX_LAYERS:,} layers kvcalc reads")
    return start, end, passes, rank


def inkling2_text(c: Config) -> dict:
    """Inkling 2: Inkling's sliding/full layout and head geometry, every layer
    GatedConvAttention beside routed experts, a normed embedding, a final block-attention
    residual query and an untied head of unpadded_vocab_size rows."""
    return _inkling2(c, looped=False)


def inkling2_loop_text(c: Config) -> dict:
    """Inkling 2 Loop: Inkling 2 whose loop layers run loop_num_passes times with the same
    weights, four message gates each, a cache layer a pass."""
    return _inkling2(c, looped=True)


def _inkling2(c: Config, looped: bool) -> dict:
    c = _canonical(c, _ALIASES_2)
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kinds = layer_kinds(c, layers, _KINDS, lambda: every_nth_full(layers, 6))
    head_rows = c.opt_int("unpadded_vocab_size", vocab) or vocab
    if head_rows > vocab:
        given = "got" if c.has("unpadded_vocab_size") else "absent, its class default is"
        raise c.error(f"field 'unpadded_vocab_size' (the output head's rows) must be at most "
                      f"vocab_size ({vocab:,}), {given} {head_rows:,}")
    start, end, passes, rank = _loop(c, layers) if looped else (0, 0, 1, 0)
    expert_d_ff = c.req_dim("moe_intermediate_size")
    moe = MoE(experts=c.req_int("n_routed_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=expert_d_ff)
    kernel = c.req_dim("conv_kernel_size")
    d_rel = c.req_dim("d_rel")
    window = c.req_dim("sliding_window_size") if "sliding" in kinds else 0

    def layer(i: int, kind: str) -> Layer:
        h, g, hd = _heads(c, kind, heads)
        sliding = kind == "sliding"
        # attention_input (none on layer 0; a full layer's has q, k and v queries), mlp_input
        queries = (0 if i == 0 else 1 if sliding else 3) + 1
        attn = GatedConvAttention(
            kind=kind, window=window if sliding else 0, heads=h, kv_heads=g, head_dim=hd,
            qk_norm=h * hd,  # the query heads' scales (keys are clipped, values normed: no weights)
            d_rel=d_rel, rel_extent=window if sliding else c.req_dim("rel_extent"),
            conv_kernel=kernel, block_conv_width=2 * hidden, dynamic_conv=not sliding,
            block_queries=queries, loop_gate_rank=rank if start <= i < end else 0)
        # input_layernorm, or a full layer's q, k and v ones; post_attention_layernorm
        return Layer(attn, moe, 2 if sliding else 4)

    own = [layer(i, k) for i, k in enumerate(kinds)]
    # in running order, each later pass a cache layer of its own (transformers deep-copies
    # the loop layers' cache layers, appending them after the model's)
    again = [dataclasses.replace(lay, owns_weights=False) for lay in own[start:end]]
    layer_list = own[:end] + again * (passes - 1) + own[end:]
    full_h, full_g, full_hd = _heads(c, "full", heads)
    extra = (2 * hidden  # the embedding's RMSNorm; the final block-attention residual query
             + (vocab - head_rows) * hidden  # input rows the head leaves out
             + (end - start) * 4 * hidden)  # Loop's message_input: q, k, v, mlp queries a layer
    notes = [_cache_note(kernel) + "; vLLM 0.32 serves no Inkling 2 model, so fit and plan "
             "withhold its counts"]
    if head_rows != vocab:
        notes.append(f"output head of {head_rows:,} rows (unpadded_vocab_size); the input "
                     f"embedding's {vocab - head_rows:,} other rows counted in extra_params")
    if looped:
        notes.append(f"layers {start}..{end - 1} run {passes} times with the same weights, "
                     f"each pass with a cache of its own ({(passes - 1) * (end - start)} "
                     f"layers beside the model's {layers})")
    fields = flat_fields(hidden, len(layer_list), full_h, full_g, full_hd, expert_d_ff,
                         head_rows, qk_norm=True, extra_params=extra,
                         tied_embeddings=False,  # Inkling2ForCausalLM ties nothing
                         max_context=c.opt_int("max_position_embeddings", 1048576) or 0,
                         notes=notes)
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "inkling_text": inkling_text, "inkling2_text": inkling2_text,
    "inkling2_loop_text": inkling2_loop_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "inkling_text": {"conv_kernel_size": 4, "d_rel": 16, "head_dim": 128,
                     "moe_intermediate_size": 3072, "n_routed_experts": 256,
                     "n_shared_experts": 2, "num_experts_per_tok": 6, "num_key_value_heads": 8,
                     "rel_extent": 1024, "sliding_window_size": 512, "swa_head_dim": 128,
                     "swa_num_attention_heads": 64, "swa_num_key_value_heads": 16},
    "inkling2_text": {"conv_kernel_size": 4, "d_rel": 16, "head_dim": 128,
                      "num_experts_per_tok": 8, "num_key_value_heads": 8, "rel_extent": 1024,
                      "sliding_window_size": 1024, "swa_head_dim": 128,
                      "swa_num_key_value_heads": 8, "unpadded_vocab_size": 200058,
                      "moe_intermediate_size": 2304, "n_routed_experts": 384,
                      "swa_num_attention_heads": 48},
    "inkling2_loop_text": {"conv_kernel_size": 4, "d_rel": 16, "head_dim": 128,
                           "num_experts_per_tok": 8, "num_key_value_heads": 8, "rel_extent": 1024,
                           "sliding_window_size": 1024, "swa_head_dim": 128,
                           "swa_num_key_value_heads": 8, "unpadded_vocab_size": 200058,
                           "moe_intermediate_size": 1152, "n_routed_experts": 128,
                           "swa_num_attention_heads": 24},
}
