"""LG's EXAONE 4 and K-EXAONE (exaone_moe, whose router's score-correction bias is a
buffer, not counted). EXAONE 3 is read as Llama (kvcalc.hfconfig.llama.llama_biased).
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, decoder, dense_then_moe, mtp_note
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, every_nth_full, layer_kinds
from kvcalc.layers import Dense, MoE


def exaone4(c: Config) -> dict:
    """EXAONE 4: sliding layers and a global one every sliding_window_pattern (4), q/k
    RMSNorms, the norms after attention and MLP only (no input norm)."""
    return decoder(c, qk_norm=True, kinds=exaone4_kinds(c), context=2048)


def exaone4_kinds(c: Config) -> list[str]:
    """EXAONE 4's (and K-EXAONE's) layer kinds: layer_types, else a global layer every
    sliding_window_pattern-th (4), none when the window is null (Exaone4Config)."""
    layers = c.req_dim("num_hidden_layers")

    def older() -> list[str]:
        if c.raw("sliding_window") is None:
            return ["full"] * layers  # Exaone4Config: a null window, no sliding layer
        return every_nth_full(layers, c.opt_int("sliding_window_pattern", 4) or 4)

    return layer_kinds(c, layers, ATTENTION_TYPES, older)


def exaone_moe(c: Config) -> dict:
    """K-EXAONE (ExaoneMoeConfig): EXAONE 4's attention (q/k RMSNorms, three sliding
    layers to one global), dense layers (mlp_layer_types, else the first
    first_k_dense_replace) then routed + shared experts."""
    layers = c.req_dim("num_hidden_layers")

    def mlps(dense: Dense) -> list:
        moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
                  expert_d_ff=c.req_int("moe_intermediate_size"),
                  shared_experts=c.opt_int("num_shared_experts", 0) or 0)
        return dense_then_moe(c, layers, dense, moe, first=1)

    return decoder(c, qk_norm=True, kinds=exaone4_kinds(c), context=2048, experts=mlps,
                   notes=tuple(mtp_note(c)))


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "exaone4": exaone4, "exaone_moe": exaone_moe,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "exaone4": {"num_key_value_heads": 32, "sliding_window": 4096},
    "exaone_moe": {"moe_intermediate_size": 1024, "num_experts": 64, "num_experts_per_tok": 8,
                   "num_key_value_heads": 32, "num_shared_experts": 1, "sliding_window": 4096},
}
