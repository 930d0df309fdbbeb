"""Aria's language model (aria_text): a MoE decoder; the wrapper's vision tower is
not counted here.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, decoder
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


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "aria_text": aria_text,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {}
