"""Gemma 3, Gemma 3n, Gemma 4 and Gemma 4 unified, VaultGemma and RecurrentGemma
(Gemma and Gemma 2 are read as Llama: kvcalc.hfconfig.llama.llama_like).

Gemma 3n (Gemma3nTextConfig, transformers 5.24 `models/gemma3n`), read layer by layer.

What differs from Gemma 3, each as configuration_gemma3n.py and modeling_gemma3n.py build it:
- `intermediate_size` is one width per layer (a single number is repeated);
- four sliding layers to one global by default (layer i is global when (i + 1) % 5 == 0);
- the last `num_kv_shared_layers` (15) layers reuse the K/V of the last earlier layer of
  their kind and cache nothing, as Gemma 4's (kvcalc.layers.shared.SharedKV): they build
  no k/v projections and no k norm;
- per-layer input embeddings (`hidden_size_per_layer_input`, 256): a second table of
  `vocab_size_per_layer_input` rows by layers x that width, a projection of the embedding
  to the same width and its norm, and in every layer a gate, a projection back and a norm;
- AltUp (`altup_num_inputs` streams, 4): the model projects the embedding into the other
  streams and back (2 x (n - 1) d x d matrices); each layer has prediction and correction
  coefficients (n^3 + n^2), a router (d x n), its norm and an output scale (d each);
- LAuReL, a low-rank residual beside attention: d x `laurel_rank` and back, and a norm;
- v's norm has no weight; the MLP's activation sparsity changes no weight.

Gemma 4 (Gemma4TextConfig, transformers 5.24 `models/gemma4`), read layer by layer.

What differs from Gemma 3, each as configuration_gemma4.py and modeling_gemma4.py build it:
- full-attention layers have their own head size, `global_head_dim` (512 when absent),
  and, where `attention_k_eq_v` is set, their own K/V heads (`num_global_key_value_heads`)
  and no v_proj (the key projection is the value's too; the cache still holds both). A
  config saved by transformers 5.24 states the same as `per_layer_config` overrides
  ({"05": {"head_dim": 512}, ...});
- the last `num_kv_shared_layers` layers reuse the K/V of the last earlier layer of their
  kind and cache nothing (kvcalc.layers.shared.SharedKV); with `use_double_wide_mlp` their
  MLP is twice as wide;
- per-layer input embeddings (`hidden_size_per_layer_input` > 0): a second table of
  `vocab_size_per_layer_input` rows by layers x that width, a projection of the embedding
  to the same width and its norm, and in every layer a gate, a projection back and a norm;
- `enable_moe_block`: every layer runs its dense MLP and, beside it, `num_experts` routed
  experts (`top_k_experts` a token, `moe_intermediate_size` wide, gate and up fused) with
  a router that scales its input and each expert, and three more norms;
- the last layer is full attention whatever `layer_types` says (transformers forces it);
- q, k norms per head; v's norm has no weight.

Gemma 4 unified (Gemma4UnifiedTextConfig, `models/gemma4_unified`) is the same attention
and MLP in Gemma 2's decoder layer (four norms, a layer scalar that is a buffer), with
neither per-layer input embeddings nor experts: its class makes those fields attribute
errors.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, attention, core_dims, decoder, flat_fields,
                                    required_window, with_runs)
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, every_nth_full, layer_kinds,
                                         sliding_window_pattern)
from kvcalc.layers import RGLRU, Attention, Dense, Layer, MoE
from kvcalc.layers.shared import SharedKV


def gemma3(c: Config) -> dict:
    """Gemma 3 (Gemma3TextConfig): 5 sliding : 1 global by default (sliding_window_pattern
    6: layer i slides when (i + 1) % 6), q/k RMSNorms, four norms per layer, tied."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: sliding_window_pattern(c, layers, 6))
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    mlp = Dense(d_ff, gated=True)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias, qk_norm=2 * head_dim), mlp, 4)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         mlp="gated", norm="rmsnorm", norms_per_layer=4,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def vaultgemma(c: Config) -> dict:
    """VaultGemma: Gemma 2's sliding/global layers with two norms per layer, tied
    embeddings."""
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, tied=True, context=8192,
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES,
                                     lambda: ["sliding", "full"] * (layers // 2)
                                     + ["sliding"] * (layers % 2)))


def _widths(c: Config, layers: int) -> list[int]:
    """intermediate_size: one MLP width per layer, or one for all (Gemma3nTextConfig)."""
    value = c.raw("intermediate_size")
    if value is MISSING or value is None:
        raise c.missing("intermediate_size")
    if not isinstance(value, list):
        return [c.check_int("intermediate_size", value)] * layers
    if len(value) != layers:
        raise c.error(f"intermediate_size lists {len(value):,} widths for {layers:,} layers")
    return [c.check_int("intermediate_size", w) for w in value]


def gemma3n_text(c: Config) -> dict:
    """Gemma 3n: 4 sliding : 1 global, per-layer MLP widths, K/V shared by the last layers,
    per-layer input embeddings, AltUp streams and a LAuReL residual in every layer."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    widths = _widths(c, layers)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                        lambda: ["full" if (i + 1) % 5 == 0 else "sliding" for i in range(layers)])
    window = c.req_int("sliding_window") if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    shared = kv_sharing(c, kinds)
    streams = c.opt_int("altup_num_inputs", 4) or 0
    rank = c.opt_int("laurel_rank", 64) or 0
    ple = c.opt_int("hidden_size_per_layer_input", 256) or 0
    # input, post-attention, pre- and post-feedforward, post-per-layer-input norms; AltUp's
    # router norm and output scale; LAuReL's norm: eight d_model-wide vectors a layer
    norms = 8
    layer_list = []
    for kind, reuse, width in zip(kinds, shared, widths):
        kw = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, qkv_bias=bias,
                  out_bias=bias, qk_norm=head_dim if reuse else 2 * head_dim)
        mixer = (SharedKV(kind=kind, window=window if kind != "full" else 0, **kw) if reuse
                 else attention(kind, window, **kw))
        layer_list.append(Layer(mixer, Dense(width), norms))
    per_layer = (streams ** 3 + streams ** 2 + hidden * streams  # AltUp's coefficients, router
                 + 2 * hidden * rank  # LAuReL's left and right
                 + 2 * hidden * ple)  # the per-layer input's gate and projection
    model = 2 * (streams - 1) * hidden * hidden  # AltUp's projections and unembeddings
    rows = width_all = 0
    notes = [f"AltUp ({streams} streams) and LAuReL (rank {rank}): "
             f"{layers * per_layer - layers * 2 * hidden * ple + model:,} parameters counted "
             "apart from the layers' matmuls"]
    if ple:
        rows = c.opt_int("vocab_size_per_layer_input", 262_144) or 0
        width_all = layers * ple
        model += hidden * width_all + ple  # per_layer_model_projection and its norm
        notes.append(f"per-layer input embeddings: a {rows:,} x {width_all:,} table read "
                     "row by row")
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, widths[0], vocab,
                         mlp="gated", norm="rmsnorm", norms_per_layer=norms,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 32_768) or 0,
                         extra_params=model + layers * per_layer, per_layer_rows=rows,
                         per_layer_width=width_all, notes=notes)
    return with_runs(fields, layer_list)


_GLOBAL_HEAD_DIM = 512  # Gemma4TextConfig.__post_init__'s `global_head_dim` default


_OVERRIDES = ("head_dim", "num_key_value_heads")  # what __post_init__ writes per layer


def kv_sharing(c: Config, kinds: list[str]) -> list[bool]:
    """Per layer, whether it reuses an earlier layer's K/V (Gemma4TextConfig.kv_sharing_modes
    "reuse"): the last `num_kv_shared_layers`, each kind having an earlier producer."""
    layers = len(kinds)
    shared = c.opt_int("num_kv_shared_layers", 0) or 0
    if not 0 <= shared <= layers:
        raise c.error(f"num_kv_shared_layers must be 0..{layers}, got {shared}")
    first = layers - shared
    if shared and shared < layers and set(kinds[:first]) != set(kinds):
        raise c.error("num_kv_shared_layers: a shared layer has no earlier layer of its "
                      "kind to take K/V from")
    return [i >= first for i in range(layers)]


def _per_layer(c: Config, kinds: list[str], head_dim: int, kv_heads: int) -> list[tuple]:
    """(head_dim, kv_heads) of each layer: the config's, overridden on full layers."""
    table = c.raw("per_layer_config")
    out = [(head_dim, kv_heads)] * len(kinds)
    if table is not MISSING and table is not None:
        if not isinstance(table, dict):
            raise c.error("field 'per_layer_config' must be an object of layer overrides")
        for key, over in table.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise c.error(f"per_layer_config: {key!r} is not a layer index") from None
            if not 0 <= i < len(kinds) or not isinstance(over, dict):
                raise c.error(f"per_layer_config: {key!r} is not a layer of this model")
            unread = sorted(set(over) - set(_OVERRIDES))
            if unread:
                raise c.error(f"per_layer_config: kvcalc does not read {unread} per layer")
            out[i] = (c.check_int("head_dim", over.get("head_dim", head_dim)),
                      c.check_int("num_key_value_heads", over.get("num_key_value_heads",
                                                                  kv_heads)))
        return out
    global_dim = c.opt_int("global_head_dim", _GLOBAL_HEAD_DIM) or _GLOBAL_HEAD_DIM
    global_kv = kv_heads
    if c.opt_bool("attention_k_eq_v", False):
        global_kv = c.opt_int("num_global_key_value_heads", kv_heads) or kv_heads
    return [(global_dim, global_kv) if k == "full" else (head_dim, kv_heads) for k in kinds]


def gemma4_text(c: Config) -> dict:
    """Gemma 4: 5 sliding : 1 global by default, a wider head on global layers, K/V shared
    by the last layers, per-layer input embeddings, optional experts beside the MLP."""
    return _gemma4(c, unified=False)


def gemma4_unified_text(c: Config) -> dict:
    """Gemma 4 unified: Gemma 4's attention and MLP in Gemma 2's four-norm layer, without
    per-layer input embeddings or experts (its class removes both fields)."""
    return _gemma4(c, unified=True)


def _gemma4(c: Config, unified: bool) -> dict:
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: every_nth_full(layers, 6))
    kinds[-1] = "full"  # Gemma4TextConfig forces the last layer to full attention
    window = c.req_int("sliding_window") if "sliding" in kinds else 0
    if c.raw("use_bidirectional_attention") == "all":
        window = window // 2 + 1  # as the class rewrites it (exclusive bounds)
    bias = c.opt_bool("attention_bias", False)
    k_eq_v = c.opt_bool("attention_k_eq_v", False)
    shared = kv_sharing(c, kinds)
    dims = _per_layer(c, kinds, head_dim, kv_heads)
    double = c.opt_bool("use_double_wide_mlp", False)
    ple = 0 if unified else c.opt_int("hidden_size_per_layer_input", 256) or 0
    moe = None
    norms = 4 + (1 if ple else 0)
    if not unified and c.opt_bool("enable_moe_block", False):
        moe = dict(experts=c.req_int("num_experts"), active=c.req_int("top_k_experts"),
                   expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1,
                   router_scales=True)
        norms += 3  # post_feedforward_layernorm_1 and _2, pre_feedforward_layernorm_2
    layer_list = []
    for kind, reuse, (hd, g) in zip(kinds, shared, dims):
        kw = dict(heads=heads, kv_heads=g, head_dim=hd, qkv_bias=bias, out_bias=bias,
                  qk_norm=hd if reuse else 2 * hd, k_is_v=k_eq_v and kind == "full")
        mixer = (SharedKV(kind=kind, window=window if kind != "full" else 0, **kw) if reuse
                 else attention(kind, window, **kw))
        width = d_ff * (2 if double and reuse else 1)
        mlp = (Dense(width) if moe is None else MoE(**moe, shared_d_ff=width))
        layer_list.append(Layer(mixer, mlp, norms))
    extra = 0
    notes = []
    rows = width_all = 0
    if ple:
        rows = c.opt_int("vocab_size_per_layer_input", 262_144) or 0
        width_all = layers * ple
        # per_layer_model_projection and its norm; each layer's gate and projection
        extra = hidden * width_all + ple + layers * 2 * hidden * ple
        notes.append(f"per-layer input embeddings: a {rows:,} x {width_all:,} table read "
                     f"row by row; their projections ({extra:,} parameters) counted apart "
                     "from the layers' matmuls")
    fields = flat_fields(hidden, layers, heads, dims[0][1], dims[0][0], d_ff, vocab,
                         mlp="gated", norm="rmsnorm", norms_per_layer=norms,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131_072) or 0,
                         extra_params=extra, per_layer_rows=rows,
                         per_layer_width=width_all, notes=notes)
    return with_runs(fields, layer_list)


def recurrent_gemma(c: Config) -> dict:
    """RecurrentGemma (Griffin): RG-LRU recurrent blocks and local (sliding-window) MQA
    attention blocks in the repeating block_types pattern; biased GeGLU MLPs of
    intermediate_size / 2; Gemma's scaled, tied embedding."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("intermediate_size") // 2  # RecurrentGemmaMlp halves it
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", 0) or hidden // heads
    window = c.opt_int("attention_window_size", 2048) or 2048
    pattern = c.raw("block_types")
    if pattern is MISSING or pattern is None:
        pattern = ["recurrent", "recurrent", "attention"]
    if (not isinstance(pattern, list) or not pattern
            or any(t not in ("recurrent", "attention") for t in pattern)):
        raise c.error("field 'block_types' must list 'recurrent' and 'attention' blocks")
    kinds = [pattern[i % len(pattern)] for i in range(layers)]
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, kind="sliding", window=window,
                     qkv_bias=bias, out_bias=True)
    rglru = RGLRU(width=c.opt_int("lru_width", hidden) or hidden, heads=heads,
                  conv_width=c.opt_int("conv1d_width", 4) or 4)
    mlp = Dense(d_ff, bias=True)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         notes=[f"hybrid: RG-LRU blocks hold a constant state; local attention "
                                f"keeps the last {window:,} tokens"])
    return with_runs(fields, [Layer(attn if k == "attention" else rglru, mlp, 2) for k in kinds])


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "gemma3_text": gemma3, "recurrent_gemma": recurrent_gemma, "vaultgemma": vaultgemma,
    "gemma4_text": gemma4_text, "gemma3n_text": gemma3n_text,
    "gemma4_unified_text": gemma4_unified_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"head_dim": 256, "num_key_value_heads": 4, "sliding_window": 4096},
    "gemma4_text": {"head_dim": 256, "num_key_value_heads": 4, "sliding_window": 512},
    "vaultgemma": {"num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
                   "sliding_window": 4096},
    "gemma3n_text": {"head_dim": 256, "num_key_value_heads": 2, "sliding_window": 512,
                     "num_kv_shared_layers": 15},
    "gemma4_unified_text": {"head_dim": 256, "num_key_value_heads": 4, "sliding_window": 1024,
                            "max_position_embeddings": 262144},
}
