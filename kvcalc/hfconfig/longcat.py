"""Meituan's LongCat-Flash: two MLA sublayers a block, zero-computation experts.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, latent_fields, with_runs
from kvcalc.layers import Dense, Latent, Layer, MoE


def longcat_flash(c: Config) -> dict:
    """LongCat-Flash: num_layers blocks of two MLA sublayers, each with a dense MLP, and one
    shortcut MoE on the first sublayer's MLP input (routed experts and zero-computation
    identity experts, moe_topk of both a token): 2 x num_layers layers for kvcalc, the
    first of each pair with the MoE beside its dense MLP (as a shared expert)."""
    hidden, heads, vocab = (c.req_dim(k) for k in ("hidden_size", "num_attention_heads",
                                                   "vocab_size"))
    # LongcatFlashConfig: num_hidden_layers is 2 x num_layers, and sets it when given alone
    if c.has("num_hidden_layers") and not c.has("num_layers"):
        blocks = c.req_dim("num_hidden_layers") // 2
    else:
        blocks = c.req_dim("num_layers")
    d_ff = c.req_dim("ffn_hidden_size", "intermediate_size")
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.req_int("kv_lora_rank"),
                 rope_dim=c.req_int("qk_rope_head_dim"), nope_dim=c.req_int("qk_nope_head_dim"),
                 v_dim=c.req_int("v_head_dim"), q_lora_rank=c.req_dim("q_lora_rank"), bias=bias)
    experts = c.req_dim("n_routed_experts", "num_local_experts")
    zero = c.opt_int("zero_expert_num", 0) or 0
    top_k = c.req_dim("moe_topk", "num_experts_per_tok")
    # The routed experts and the first sublayer's MLP read the same normed input and are
    # summed into the block's output: the MLP counts as the MoE's shared expert.
    moe = MoE(experts=experts, active=top_k, zero_experts=zero,
              expert_d_ff=c.req_dim("expert_ffn_hidden_size", "moe_intermediate_size"),
              shared_experts=1, shared_d_ff=d_ff)
    notes = [f"MLA: the cache holds kv_lora_rank + qk_rope_head_dim = "
             f"{mla.kv_lora_rank + mla.rope_dim} elements per token per sublayer, two "
             f"sublayers a block ({blocks} blocks, {2 * blocks} layers here)",
             f"zero-computation experts: a token's {top_k} picks range over {experts} routed "
             f"and {zero} identity experts; the active count takes all {top_k} as routed (its "
             "upper bound: an identity pick runs nothing)"]
    fields = latent_fields(c, mla, hidden, 2 * blocks, d_ff, vocab, bias, 131072, notes=notes)
    return with_runs(fields, [Layer(mla, moe, 2), Layer(mla, Dense(d_ff), 2)] * blocks)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "longcat_flash": longcat_flash,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "longcat_flash": {"expert_ffn_hidden_size": 2048, "kv_lora_rank": 512, "moe_topk": 12,
                      "n_routed_experts": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                      "qk_rope_head_dim": 64, "v_head_dim": 128, "zero_expert_num": 256},
}
