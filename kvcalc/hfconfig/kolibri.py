"""Kolibri 1: routed experts and a shared MLP on every layer, sliding and full
attention.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, experts_only
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, every_nth_full, layer_kinds
from kvcalc.layers import MoE


def kolibri1(c: Config) -> dict:
    """Kolibri 1: four sliding layers to one global (layer_types; the global ones NoPE),
    per-head q/k RMSNorms, four norms a layer, every layer routed experts of
    moe_intermediate_size and a shared MLP of shared_expert_intermediate_size (0: none);
    the router's score-correction bias is a buffer (not counted)."""
    layers = c.req_dim("num_hidden_layers")
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    # Kolibri1Config's attribute_map: num_experts is num_local_experts
    moe = MoE(experts=c.req_int("num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                        lambda: every_nth_full(layers, 5))  # Kolibri1Config's default
    return experts_only(c, moe, kinds=kinds, qk_norm=True, norms=4, context=262144)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "kolibri1": kolibri1,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "kolibri1": {"head_dim": 128, "moe_intermediate_size": 512, "num_experts_per_tok": 6,
                 "num_key_value_heads": 4, "num_local_experts": 384,
                 "shared_expert_intermediate_size": 512, "sliding_window": 513},
}
