"""Language models of multimodal families that transformers 5.24 builds as their own
model_type: Aria's MoE decoder (aria_text), Moshi's temporal transformer (moshi), Mllama's
decoder with interleaved cross-attention layers (mllama_text_model, Llama 3.2 Vision).

Each is read as its configuration class (`configuration_<family>.py`) and decoder layer
(`modeling_<family>.py`) build it; the wrapper's vision tower is not counted here.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims
from kvcalc.hfconfig.llama_2026 import decoder
from kvcalc.layers import Attention, Dense, ImageCrossAttention, Layer, MoE, NoMixer


def aria_text(c: Config) -> dict:
    """Aria's language model: Llama attention, every layer a MoE (bias-free router, gated
    experts of intermediate_size) beside one always-on MLP moe_num_shared_experts x
    intermediate_size wide."""
    layers = c.req_dim("num_hidden_layers")
    d_ff = c.req_dim("intermediate_size")
    shared = c.opt_int("moe_num_shared_experts", 2)
    mlp_bias = c.opt_bool("mlp_bias", False)
    # AriaSharedExpertsMLP: gate/up/down of intermediate_size x moe_num_shared_experts, with
    # biases when mlp_bias (the routed experts have none)
    moe = MoE(experts=c.opt_int("moe_num_experts", 8), active=c.opt_int("moe_topk", 2),
              expert_d_ff=d_ff, shared_experts=1 if shared else 0, shared_d_ff=shared * d_ff)
    bias = c.opt_bool("attention_bias", False)
    shared_bias = (2 * shared * d_ff + c.req_dim("hidden_size")) if mlp_bias and shared else 0
    return decoder(c, qkv_bias=bias, out_bias=bias, experts=lambda _: [moe] * layers,
                   extra_params=layers * shared_bias, context=2048,
                   notes=("the shared MLP's biases (mlp_bias) in extra_params",) if shared_bias
                   else ())



def moshi(c: Config) -> dict:
    """Moshi's temporal transformer (MoshiForCausalLM): Llama-shaped, bias-free, a gated MLP
    of ffn_dim / 2 (fc1 emits gate and value together), sliding_window tokens cached a
    layer, one extra embedding row. The depth
    decoder and the Mimi audio codec beside it are not counted."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("ffn_dim") // 2  # MoshiGatingMLP: fc1 d -> ffn_dim, fc2 ffn_dim / 2 -> d
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    # transformers caches each layer in a DynamicSlidingWindowLayer of sliding_window tokens
    window = c.opt_int("sliding_window", 0) or 0
    attn = attention("sliding" if window else "full", window, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         extra_params=hidden,  # embed_tokens: vocab_size + 1 rows
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 3000) or 0,
                         notes=["embed_tokens has vocab_size + 1 rows (extra_params); the "
                                "depth decoder and the Mimi codec are not counted"])
    return with_runs(fields, [Layer(attn, Dense(d_ff), 2)] * layers)


# MllamaTextConfig: cross_attention_layers None -> these (Llama 3.2 Vision 11B's, of 40)
_MLLAMA_CROSS_LAYERS = (3, 8, 13, 18, 23, 28, 33, 38)


def mllama_text(c: Config) -> dict:
    """Mllama's language model (Llama 3.2 Vision): Llama layers, and at
    cross_attention_layers a layer that only cross-attends to the image's tokens (q/k
    RMSNorms, tanh gates on attention and MLP) and keeps their K/V; 8 extra embedding rows."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = hidden // heads  # MllamaTextSelfAttention / CrossAttention
    cross_at = c.raw("cross_attention_layers")
    if cross_at is MISSING or cross_at is None:
        cross_at = _MLLAMA_CROSS_LAYERS
    if not isinstance(cross_at, list | tuple):
        raise c.error("field 'cross_attention_layers' must be a list of layer indices")
    cross_at = {c.check_int("cross_attention_layers", i) for i in cross_at}
    mlp = Dense(d_ff)
    self_layer = Layer(Attention(heads, kv_heads, head_dim), mlp, 2)
    # no self-attention in a cross layer: its mixer caches nothing, its cross-attention
    # keeps the vision tokens' K/V (transformers: that layer's DynamicCache entry)
    cross_layer = Layer(NoMixer(), mlp, 2, cross=ImageCrossAttention(
        heads, kv_heads, head_dim, qk_norm=2 * head_dim))
    layer_list = [cross_layer if i in cross_at else self_layer for i in range(layers)]
    crosses = sum(1 for layer in layer_list if layer.cross is not None)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         # embed_tokens: vocab_size + 8 rows; two tanh gates a cross layer
                         extra_params=8 * hidden + 2 * crosses,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=[f"{crosses} cross-attention layers keep the image's tokens "
                                "(the encoder length), not the text's; embed_tokens has "
                                "vocab_size + 8 rows and each cross layer two gates "
                                "(extra_params)"])
    return with_runs(fields, layer_list)
