"""Language models of multimodal families that transformers 5.24 builds as their own
model_type: Aria's MoE decoder (aria_text), Mllama's decoder with interleaved
cross-attention layers (mllama_text_model).

Each is read as its configuration class (`configuration_<family>.py`) and decoder layer
(`modeling_<family>.py`) build it; the wrapper's vision tower is not counted here.
"""

from __future__ import annotations

from kvcalc.hfconfig.config import Config
from kvcalc.hfconfig.llama_2026 import decoder
from kvcalc.layers import MoE


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
