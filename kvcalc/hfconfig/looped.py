"""Looped decoders: layers run several times with the same weights, each pass keeping a
cache of its own (Dory, HRM-Text).

A pass over weights an earlier layer holds is a `Layer(..., owns_weights=False)`: its
parameters are counted once, with the layer that owns them, while its cache, its FLOPs
and the K/V and weights it reads count once per pass. The layers are listed in the
order they run; transformers 5.24 caches them as its forward does (HRM: in that order;
Dory: the recurrent section's later loops appended after the model's layers).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from kvcalc.ground.dtypes import MAX_LAYERS
from kvcalc.hfconfig.config import Config, describe, flat_fields, required_window, with_runs
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import Dense, Layer
from kvcalc.layers.gated import NormalizedGatedAttention, OutputGatedAttention


def _again(layers: list[Layer]) -> list[Layer]:
    """The same layers run again: their weights are the ones already listed."""
    return [dataclasses.replace(layer, owns_weights=False) for layer in layers]


def _passes(c: Config, layers: int, passes: int) -> None:
    """Refuse a loop whose passes list more layers than kvcalc reads, before listing them."""
    if layers * passes > MAX_LAYERS:
        raise c.error(f"{passes:,} passes over {layers:,} layers exceed the "
                      f"{MAX_LAYERS:,} layers kvcalc reads")


def dory(c: Config) -> dict:
    """Dory (NVIDIA Nemotron-Labs): a looped nGPT transformer whose recurrent section runs
    n_recurrent_loops times between its input and output layers, a cache per loop."""
    hidden, heads, vocab, d_ff = (c.req_dim(k) for k in (
        "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size"))
    counts = {k: c.req_int(k) for k in ("num_hidden_layers", "n_input_layers",
                                        "n_output_layers")}
    recurrent = c.opt_int("n_recurrent_layers", None)
    types = c.raw("layer_types")
    if isinstance(types, list) and "mlp" in types:
        # DoryConfig.__post_init__: released configs list each layer as an attention
        # block and an mlp block, every count doubled
        c = c.over({**c.cfg, "layer_types": types[::2]}, c.where)
        counts = {k: n // 2 for k, n in counts.items()}
        recurrent = None if recurrent is None else recurrent // 2
    layers, first, last = counts.values()
    if layers <= 0:
        raise c.error(f"field 'num_hidden_layers' must be positive, got {layers}")
    recurrent = layers - first - last if recurrent is None else recurrent
    if min(first, last, recurrent) < 0 or first + recurrent + last != layers:
        raise c.error("n_input_layers + n_recurrent_layers + n_output_layers must equal "
                      "num_hidden_layers")
    loops = c.req_int("n_recurrent_loops")
    if loops < 1:
        raise c.error(f"field 'n_recurrent_loops' must be at least 1, got {loops}")
    _passes(c, recurrent, loops)
    mode = c.raw("recurrent_kv_cache_mode")
    if mode != "per_loop":
        # 'last_loop': earlier loops attend over the last loop's cache without writing
        raise c.error(f"recurrent_kv_cache_mode {describe(mode)}: kvcalc reads Dory's "
                      "'per_loop' caches only")
    kv_heads = c.req_dim("num_key_value_heads")
    head_dim = c.req_dim("head_dim")
    kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                        lambda: ["full" if (i + 1) % 4 == 0 else "sliding"
                                 for i in range(layers)])
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    mlp = Dense(d_ff, bias=c.opt_bool("mlp_bias", False))
    # DoryL2Norm has no weight: the layer's four norms and the final one hold none
    own = [Layer(NormalizedGatedAttention(
        kind=k, window=window if k == "sliding" else 0, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, qkv_bias=bias, out_bias=bias, gate_width=head_dim), mlp, 0)
        for k in kinds]
    loop = own[first:first + recurrent]
    layer_list = own[:first + recurrent] + _again(loop) * (loops - 1) + own[first + recurrent:]
    # per layer: the MLP's suv_gate and suv_up (d_ff each), the residual rates lambda_1
    # and lambda_2 (hidden each); the lm_head's per-token logit_scale
    extra = layers * (2 * d_ff + 2 * hidden) + vocab
    fields = flat_fields(hidden, len(layer_list), heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, mlp_bias=mlp.bias, norms_per_layer=0,
                         final_norm=False, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=[f"{layers} layers' weights; the {recurrent} recurrent ones run "
                                f"{loops} times, each loop with its own cache "
                                f"({len(layer_list)} layer passes)",
                                "extra_params: the MLP's suv_gate/suv_up and the residual rates "
                                "lambda_1/lambda_2 per layer, the lm_head's logit_scale"])
    return with_runs(fields, layer_list)


def hrm_text(c: Config) -> dict:
    """HRM-Text (Sapient): two stacks of layers, a low-level one run L_cycles times and a
    high-level one once in each of H_cycles cycles, every pass with its own cache."""
    hidden, heads, vocab, d_ff = (c.req_dim(k) for k in (
        "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size"))
    # HrmTextConfig keeps the per-stack count in num_layers_per_stack once built and
    # rewrites num_hidden_layers to the cache slots; a first construction passes it there
    per_stack = c.opt_int("num_layers_per_stack", None)
    per_stack = c.req_dim("num_hidden_layers") if per_stack is None else per_stack
    if per_stack <= 0:
        raise c.error(f"field 'num_layers_per_stack' must be positive, got {per_stack}")
    high, low = c.req_dim("H_cycles"), c.req_dim("L_cycles")
    _passes(c, per_stack, high * (low + 1))
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    # multi-head: HrmTextAttention sizes k and v for every query head; a gate per element
    layer = Layer(OutputGatedAttention(heads=heads, kv_heads=heads, head_dim=head_dim,
                                       qkv_bias=bias, out_bias=bias, gate_width=head_dim),
                  Dense(d_ff, bias=c.opt_bool("mlp_bias", False)), 0)  # weightless RMSNorms
    stack = [layer] * per_stack
    layer_list: list[Layer] = []
    for h in range(high):  # HrmTextModel.forward: L_cycles low passes, then the high one
        for l in range(low):  # the low stack's weights, first run at (0, 0)
            layer_list += stack if h == l == 0 else _again(stack)
        layer_list += stack if h == 0 else _again(stack)  # the high stack's
    fields = flat_fields(hidden, len(layer_list), heads, heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                         norms_per_layer=0, final_norm=False, extra_params=hidden,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=[f"two stacks of {per_stack} layers; {high} cycles of {low} "
                                f"low-level passes and one high-level pass, each pass with "
                                f"its own cache ({len(layer_list)} layer passes)",
                                "extra_params: z_L_init, the low-level stack's initial state"])
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "dory": dory, "hrm_text": hrm_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "dory": {"head_dim": 256, "num_key_value_heads": 4, "n_input_layers": 8, "n_output_layers": 8,
             "n_recurrent_loops": 2, "recurrent_kv_cache_mode": 'per_loop',
             "sliding_window": 1024},
    "hrm_text": {"head_dim": 128, "H_cycles": 2, "L_cycles": 3},
}
