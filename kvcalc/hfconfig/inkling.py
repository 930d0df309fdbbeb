"""Inkling's language model (inkling_text), as InklingTextConfig and modeling_inkling.py
in transformers 5.24 read it: five sliding layers to one full by default (or
local_layer_ids), the sliding ones with their own head geometry (swa_*), every layer's
attention and MLP wrapped in short convolutions (kvcalc.layers_inkling), routed experts
beside shared ones, a normed embedding and an output head never tied to it.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import Layer
from kvcalc.layers_inkling import ConvAttention, ScaledDense, SharedScoredMoE

# InklingTextConfig.attribute_map: the checkpoint's names -> the names the model reads
_ALIASES = {"sconv_kernel_size": "conv_kernel_size", "model_max_length": "max_position_embeddings",
            "num_local_experts": "n_routed_experts", "sliding_window": "sliding_window_size"}


def _canonical(c: Config) -> Config:
    cfg = dict(c.cfg)
    for old, new in _ALIASES.items():
        if old in cfg and new not in cfg:
            cfg[new] = cfg.pop(old)
    return Config(cfg, c.model_type, c.where)


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
    kinds = layer_kinds(c, layers, {"hybrid": "full", "hybrid_sliding": "sliding"},
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
        if kind == "sliding":
            h, g, hd = (c.req_dim(k) for k in ("swa_num_attention_heads",
                                               "swa_num_key_value_heads", "swa_head_dim"))
            extent = window
        else:
            h, g, hd = heads, c.req_dim("num_key_value_heads"), c.req_dim("head_dim")
            extent = c.req_dim("rel_extent")
        return ConvAttention(kind=kind, window=window if kind == "sliding" else 0, heads=h,
                             kv_heads=g, head_dim=hd, qk_norm=2 * hd, d_rel=d_rel,
                             rel_extent=extent, conv_kernel=kernel, block_conv_width=2 * hidden)

    layer_list = [Layer(attn(k), moe if t == "sparse" else dense, 2)
                  for k, t in zip(kinds, types)]
    full = attn("full")
    mtp = c.opt_int("num_mtp_layers", 0) or 0
    notes = ["each layer also caches its four short convolutions' last "
             f"{kernel} inputs (fp32); vLLM's paging of them is not modelled"]
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) are not counted")
    fields = flat_fields(hidden, layers, heads, full.kv_heads, full.head_dim, dense_d_ff, vocab,
                         qk_norm=True, extra_params=hidden,  # the embedding's RMSNorm
                         tied_embeddings=False,  # InklingForCausalLM ties nothing
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=notes)
    return with_runs(fields, layer_list)
