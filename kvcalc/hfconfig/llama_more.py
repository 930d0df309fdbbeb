"""More Llama-shaped decoders transformers 5 builds, each with one part of its own:
BitNet (sub-norms before o_proj and down_proj), DiffLlama (differential attention's four
lambda vectors a layer), HyperCLOVA X (post-attention and post-MLP norms, biases),
Mellum (sliding layers by layer_types, per-head q/k norms, experts by mlp_layer_types),
Emu3's language model (biases over a text-and-image-token vocabulary).

Each reads as its configuration class (`configuration_*.py`) and decoder layer
(`modeling_*.py`) in transformers 5.24 do, through kvcalc.hfconfig.llama_2026.decoder.
"""

from __future__ import annotations

from kvcalc.hfconfig.config import MISSING, Config, describe
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.hfconfig.llama_2026 import decoder
from kvcalc.layers import MoE


def bitnet(c: Config) -> dict:
    """BitNet b1.58: Llama with an RMSNorm before o_proj (attn_sub_norm, hidden_size wide)
    and one before down_proj (ffn_sub_norm, intermediate_size wide)."""
    layers = c.req_dim("num_hidden_layers")
    d_ff = c.req_dim("intermediate_size")
    bias = c.opt_bool("attention_bias", False)
    # three hidden-wide norms a layer (input, post-attention, attn_sub_norm); the MLP's
    # sub-norm is intermediate_size wide
    return decoder(c, qkv_bias=bias, out_bias=bias, norms=3, extra_params=layers * d_ff,
                   context=2048,
                   notes=("ffn_sub_norm: an intermediate_size RMSNorm a layer "
                          "(extra_params)",))


def diffllama(c: Config) -> dict:
    """DiffLlama (Differential Transformer): Llama whose attention subtracts two softmax
    maps, weighted by four learned head_dim vectors a layer (lambda_q1/k1/q2/k2); K and V
    cached as Llama's."""
    hidden, layers, heads = (c.req_dim(k) for k in ("hidden_size", "num_hidden_layers",
                                                    "num_attention_heads"))
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, extra_params=layers * 4 * head_dim,
                   context=2048,
                   notes=("differential attention: lambda_q1, lambda_k1, lambda_q2, "
                          "lambda_k2 (head_dim each) per layer (extra_params)",))


def hyperclovax(c: Config) -> dict:
    """HyperCLOVA X: Llama (Granite's multipliers) with attention_bias and mlp_bias, and
    norms after attention and MLP as well when use_post_norm (four a layer)."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   norms=4 if c.opt_bool("use_post_norm", True) else 2, context=2048)


def _mlp_layer_types(c: Config, layers: int) -> list[bool]:
    """Which layers are sparse: `mlp_layer_types` ("sparse"/"dense"), else every one
    (MellumConfig)."""
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        return [True] * layers
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    return [t == "sparse" for t in types]


def mellum(c: Config) -> dict:
    """Mellum: full and sliding layers by layer_types, per-head q/k RMSNorms, routed experts
    (moe_intermediate_size, no shared expert) on the "sparse" layers of mlp_layer_types;
    its multi-token-prediction layer is not built by transformers (not counted)."""
    layers = c.req_dim("num_hidden_layers")
    sparse = _mlp_layer_types(c, layers)
    # MellumConfig's attribute_map: num_experts is num_local_experts, num_mtp_layers
    # num_nextn_predict_layers (saved under the second names)
    moe = MoE(experts=c.req_int("num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size")) if any(sparse) else None
    bias = c.opt_bool("attention_bias", False)
    mtp = c.opt_int("num_nextn_predict_layers", 0, "num_mtp_layers") or 0
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True,
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES, lambda: ["full"] * layers),
                   experts=lambda dense: [moe if s else dense for s in sparse],
                   context=131072,
                   notes=(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not "
                          "counted (transformers does not build them)",) if mtp else ())


def emu3_text(c: Config) -> dict:
    """Emu3's language model (emu3_text_model, the text_config of emu3): Llama with
    attention_bias and mlp_bias over a vocabulary of text and vision tokens."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   context=9216)
