"""Language models of multimodal families that transformers 5.24 builds as their own
model_type: Aria's MoE decoder (aria_text), Moshi's temporal transformer (moshi).

Each is read as its configuration class (`configuration_<family>.py`) and decoder layer
(`modeling_<family>.py`) build it; the wrapper's vision tower is not counted here.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import Config
from kvcalc.hfconfig.llama_2026 import decoder
from kvcalc.layers import Dense, Layer, MoE


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
