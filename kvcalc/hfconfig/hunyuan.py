"""Tencent's Hunyuan decoders: Hunyuan dense and MoE, Hunyuan 3 (hy_v3), HY V4
(gated MLA with a lightning indexer and hyper-connections) and its multimodal wrapper's
language model.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, decoder, dense_then_moe, describe,
                                    latent_fields, with_runs)
from kvcalc.layers.hyper_connections import HyperConnections
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers.indexed import IndexedLatent


def hunyuan_dense(c: Config) -> dict:
    """Hunyuan dense (HunYuanDenseV1): Llama with per-head q/k RMSNorms."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, context=2048,
                   head_dim_required=True)


def hunyuan_moe(c: Config) -> dict:
    """Hunyuan MoE (HunYuanMoEV1, Hunyuan-A13B): Hunyuan dense's attention (per-head q/k
    RMSNorms), every layer num_experts experts of intermediate_size (moe_topk of them a
    token, one number or the same for every layer) beside one shared MLP of that width."""
    layers = c.req_dim("num_hidden_layers")
    topk = c.raw("moe_topk", "num_experts_per_tok")
    if isinstance(topk, list) and topk and all(t == topk[0] for t in topk):
        topk = topk[0]  # Hunyuan-A13B lists it per layer
    if topk is MISSING or topk is None:
        topk = 1  # HunYuanMoEV1Config's default
    active = c.check_int("moe_topk", topk)
    bias = c.opt_bool("attention_bias", False)

    def mlps(dense: Dense) -> list:
        moe = MoE(experts=c.opt_int("num_experts", 1) or 1, active=active,
                  expert_d_ff=dense.d_ff, shared_experts=1)
        return [moe] * layers

    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, context=2048,
                   head_dim_required=True, experts=mlps)


def hy_v3(c: Config) -> dict:
    """Hunyuan 3 (HYV3): GQA with per-head q/k norms, a dense first layer (mlp_layer_types),
    then num_experts routed experts (sigmoid router, its correction bias a buffer) beside
    one shared MLP num_shared_experts x moe_intermediate_size wide."""
    d_ff = c.req_dim("intermediate_size")
    hidden = c.req_dim("hidden_size")
    shared = c.opt_int("num_shared_experts", 1) or 0
    expert_ff = c.req_dim("moe_intermediate_size")
    # HYV3MLP takes `intermediate_size or config.intermediate_size`: no shared experts
    # still builds a shared MLP, as wide as the dense one
    shared_ff = shared * expert_ff or d_ff
    moe = MoE(experts=c.req_dim("num_experts", "num_local_experts"),
              active=c.req_dim("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1, shared_d_ff=shared_ff)
    dense = Dense(d_ff, bias=c.opt_bool("mlp_bias", False))
    mlps = dense_then_moe(c, c.req_dim("num_hidden_layers"), dense, moe, first=1)
    extra, notes = 0, ()
    if dense.bias:  # the shared MLP is a dense one: mlp_bias gives it biases too
        extra = sum(m is moe for m in mlps) * (2 * shared_ff + hidden)
        notes = (f"mlp_bias: the shared experts' biases ({extra:,}) in extra_params",)
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=dense.bias, qk_norm=True,
                   context=131072, experts=lambda _: mlps, extra_params=extra, notes=notes)


def _hy_indexer_types(c: Config, layers: int) -> list[str]:
    """HYV4Config's per-layer indexer mode: `indexer_types`, else the first layer and every
    fourth from layer 1 run their own indexer ("full"), the others reuse the last full
    layer's choice ("shared") and have none."""
    types = c.raw("indexer_types")
    if types is MISSING or types is None:
        return ["full" if i == 0 or (i - 1) % 4 == 0 else "shared" for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("full", "shared") for t in types)):
        raise c.error(f"field 'indexer_types' must list {layers} entries, each \"full\" or "
                      f"\"shared\", got {describe(types)}")
    return types


def hy_v4(c: Config) -> dict:
    """HY V4 (Hy4): DeepSeek-V3.2's MLA with q LoRA, a sigmoid output gate per element
    (gate_proj) and a learned sink per head; the lightning indexer and its key cache on
    the "full" indexer_types layers (the "shared" ones reuse its choice); one dense layer,
    then routed + shared experts (mlp_layer_types); hc_mult residual streams mixed by
    hyper-connections around every block."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    # HYV4Attention builds the same attention whatever layer_types says (it names the mask)
    geometry = dict(heads=heads, kv_lora_rank=c.req_dim("kv_lora_rank"),
                    rope_dim=c.req_dim("qk_rope_head_dim"),
                    nope_dim=c.req_dim("qk_nope_head_dim"), v_dim=c.req_dim("v_head_dim"),
                    q_lora_rank=c.req_dim("q_lora_rank"), bias=bias, value_gate=True,
                    sinks=True)
    indexed = IndexedLatent(**geometry, index_heads=c.req_dim("index_n_heads"),
                            index_head_dim=c.req_dim("index_head_dim"),
                            index_topk=c.req_dim("index_topk"))
    shared = Latent(**geometry)
    expert_ff = c.req_dim("moe_intermediate_size")
    n_shared = c.opt_int("n_shared_experts", 0) or 0
    # HYV4Config's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_dim("n_routed_experts", "num_local_experts"),
              active=c.req_dim("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1 if n_shared else 0, shared_d_ff=expert_ff * n_shared)
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:  # HYV4Config: one dense layer, experts after
        types = ["dense"] * min(1, layers) + ["sparse"] * (layers - 1)
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    mixers = [indexed if t == "full" else shared for t in _hy_indexer_types(c, layers)]
    layer_list = [Layer(m, moe if t == "sparse" else Dense(d_ff), 2)
                  for m, t in zip(mixers, types)]
    notes = [f"MLA: the cache holds kv_lora_rank + qk_rope_head_dim = "
             f"{indexed.kv_lora_rank + indexed.rope_dim} elements per token per layer, and "
             f"on the layers with their own indexer its key, {indexed.index_token_bytes()} B "
             f"(fp8 and its scales)"]
    if c.model_type == "hy_v4_vl_text":
        notes.append("vLLM 0.32 has no HY V4 VL model (only HYV4ForCausalLM): its language "
                     "model is paged as HY V4's")
    fields = latent_fields(c, indexed, hidden, layers, d_ff, vocab, bias, 262144, notes=notes,
                           hyper_connections=HyperConnections(c.req_dim("hc_mult")))
    return with_runs(fields, layer_list)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
# hy_v4_vl_text: HY V4's language model in its multimodal wrapper
    "hunyuan_v1_dense": hunyuan_dense, "hunyuan_v1_moe": hunyuan_moe, "hy_v4": hy_v4,
    "hy_v4_vl_text": hy_v4, "hy_v3": hy_v3,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "hy_v3": {"head_dim": 128, "num_key_value_heads": 8, "num_experts": 192,
              "num_experts_per_tok": 8, "moe_intermediate_size": 1536},
    "hy_v4": {"hc_mult": 4, "index_head_dim": 128, "index_n_heads": 16, "index_topk": 2048,
              "kv_lora_rank": 512, "moe_intermediate_size": 768, "n_routed_experts": 256,
              "n_shared_experts": 1, "num_experts_per_tok": 8, "q_lora_rank": 1536,
              "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256},
    "hy_v4_vl_text": {"hc_mult": 4, "index_head_dim": 128, "index_n_heads": 32,
                      "index_topk": 2048, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
                      "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                      "q_lora_rank": 2048, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
                      "v_head_dim": 256},
}
