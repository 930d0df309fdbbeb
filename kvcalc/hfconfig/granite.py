"""Granite's later decoders in transformers 5.24: GraniteMoeShared (GraniteMoE's experts
plus one always-on shared MLP), Granite SWA and GraniteMoE SWA (three sliding layers to one
global, a learned sink logit per query head in every layer).

Each reads as its configuration class (`configuration_granite*.py`) and decoder layer
(`modeling_granite*.py`) do; Granite 3 and GraniteMoE themselves are
kvcalc.hfconfig.llama.llama_variants.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, decoder
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds
from kvcalc.layers import MoE


_SWA = ("granite_swa", "granitemoe_swa")


_EXPERTS = ("granitemoeshared", "granitemoe_swa")


def granite_later(c: Config) -> dict:
    """Granite SWA, GraniteMoE SWA, GraniteMoeShared: Llama with attention_bias on all four
    projections; the SWA ones slide on three layers of four (layer_types) with per-head
    sinks, the MoE ones add a shared MLP of shared_intermediate_size (0: none)."""
    family = c.model_type
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("attention_bias", False)
    kinds = None
    if family in _SWA:
        # Granite*SWAConfig: layer i global when i % 4 == 0, the others sliding
        kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                            lambda: ["full" if i % 4 == 0 else "sliding" for i in range(layers)])
    experts = None
    if family in _EXPERTS:
        shared_d_ff = c.opt_int("shared_intermediate_size", 0) or 0

        def experts(mlp):
            moe = MoE(experts=c.req_int("num_local_experts"),
                      active=c.req_int("num_experts_per_tok"), expert_d_ff=mlp.d_ff,
                      shared_experts=1 if shared_d_ff else 0, shared_d_ff=shared_d_ff)
            return [moe] * layers

    # Granite SWA's MLP honours mlp_bias; the experts and the shared MLP have none
    mlp_bias = c.opt_bool("mlp_bias", False) if family == "granite_swa" else False
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=mlp_bias, kinds=kinds,
                   experts=experts, sinks=family in _SWA, tied=family == "granite_swa",
                   context=8192 if family == "granite_swa" else 2048)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "granitemoeshared": granite_later, "granite_swa": granite_later,
    "granitemoe_swa": granite_later,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "granitemoeshared": {"num_experts_per_tok": 2, "num_local_experts": 8},
    "granite_swa": {"num_key_value_heads": 4, "sliding_window": 128},
    "granitemoe_swa": {"num_experts_per_tok": 2, "num_local_experts": 8, "sliding_window": 128},
}
