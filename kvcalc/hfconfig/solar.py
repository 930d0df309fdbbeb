"""Upstage's Solar Open: routed experts and a shared MLP on every layer, no dense MLP
width of its own.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, experts_only
from kvcalc.layers import MoE


def solar_open(c: Config) -> dict:
    """Solar Open: GQA (q/k/v biases when attention_bias, o_proj never), every layer
    routed experts of moe_intermediate_size plus one shared MLP n_shared_experts times as
    wide; the router's score-correction bias is a buffer (not counted)."""
    expert_ff = c.req_int("moe_intermediate_size")
    shared = c.opt_int("n_shared_experts", 0) or 0
    # SolarOpenConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1 if shared else 0, shared_d_ff=expert_ff * shared)
    return experts_only(c, moe, qkv_bias=c.opt_bool("attention_bias", False), context=131072)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "solar_open": solar_open,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "solar_open": {"head_dim": 128, "moe_intermediate_size": 1280, "n_routed_experts": 128,
                   "n_shared_experts": 1, "num_experts_per_tok": 8, "num_key_value_heads": 8},
}
