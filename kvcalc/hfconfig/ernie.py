"""Baidu's ERNIE 4.5 and ERNIE 4.5 MoE (whose router's score correction is a
parameter, one value per expert).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, decoder
from kvcalc.layers import Dense, MoE


def ernie4_5(c: Config) -> dict:
    """ERNIE 4.5 dense: use_bias on every projection, tied embeddings by default."""
    bias = c.opt_bool("use_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied=True, context=131072)


def ernie4_5_moe(c: Config) -> dict:
    """ERNIE 4.5 MoE: use_bias on attention and dense MLPs, experts on every
    moe_layer_interval-th layer from moe_layer_start_index to moe_layer_end_index (-1:
    the last), shared experts, a learned per-expert score correction. The expert count and
    top-k also go by Ernie4_5_MoeConfig.attribute_map's num_experts / num_experts_per_tok."""
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("use_bias", False)
    experts = c.opt_int("moe_num_experts", 0, "num_experts") or 0
    start = c.opt_int("moe_layer_start_index", 1) or 0
    end = c.opt_int("moe_layer_end_index", -1)
    end = layers - 1 if end is None or end == -1 else end
    every = c.opt_int("moe_layer_interval", 1) or 1
    sparse = [experts > 0 and (i + 1) % every == 0 and start <= i <= end for i in range(layers)]

    def mlps(dense: Dense) -> list:
        if not any(sparse):
            return [dense] * layers
        moe = MoE(experts=experts, active=c.req_int("moe_k", "num_experts_per_tok"),
                  expert_d_ff=c.req_int("moe_intermediate_size"),
                  shared_experts=c.opt_int("moe_num_shared_experts", 0) or 0,
                  router_bias=True)  # gate.weight and moe_statics.e_score_correction_bias
        return [moe if s else dense for s in sparse]

    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied=True, context=131072,
                   experts=mlps)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "ernie4_5": ernie4_5, "ernie4_5_moe": ernie4_5_moe,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "ernie4_5": {"head_dim": 128, "num_key_value_heads": 2},
    "ernie4_5_moe": {"moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64,
                     "moe_num_shared_experts": 2, "num_key_value_heads": 4},
}
