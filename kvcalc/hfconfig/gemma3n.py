"""Gemma 3n (Gemma3nTextConfig, transformers 5.24 `models/gemma3n`), read layer by layer.

What differs from Gemma 3, each as configuration_gemma3n.py and modeling_gemma3n.py build it:
- `intermediate_size` is one width per layer (a single number is repeated);
- four sliding layers to one global by default (layer i is global when (i + 1) % 5 == 0);
- the last `num_kv_shared_layers` (15) layers reuse the K/V of the last earlier layer of
  their kind and cache nothing, as Gemma 4's (kvcalc.layers_shared.SharedKV): they build
  no k/v projections and no k norm;
- per-layer input embeddings (`hidden_size_per_layer_input`, 256): a second table of
  `vocab_size_per_layer_input` rows by layers x that width, a projection of the embedding
  to the same width and its norm, and in every layer a gate, a projection back and a norm;
- AltUp (`altup_num_inputs` streams, 4): the model projects the embedding into the other
  streams and back (2 x (n - 1) d x d matrices); each layer has prediction and correction
  coefficients (n^3 + n^2), a router (d x n), its norm and an output scale (d each);
- LAuReL, a low-rank residual beside attention: d x `laurel_rank` and back, and a norm;
- v's norm has no weight; the MLP's activation sparsity changes no weight.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config
from kvcalc.hfconfig.gemma import kv_sharing
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import Dense, Layer
from kvcalc.layers_shared import SharedKV


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
