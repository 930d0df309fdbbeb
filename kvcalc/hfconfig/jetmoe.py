"""JetMoE: experts in attention too.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import Config, flat_fields, with_runs
from kvcalc.layers import Layer, MoE
from kvcalc.layers.moa import MixtureOfAttention


def jetmoe(c: Config) -> dict:
    """JetMoE: a mixture of attention heads (top-k of num_local_experts query/output
    experts over one shared K/V projection of num_key_value_heads x kv_channels) and a
    mixture of gated MLP experts, each block with an output bias."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    # JetMoE's own remote-code JetMoEConfig (jetmoe/jetmoe-8b's `auto_map`) names the MLP
    # width, the experts and top-k ffn_hidden_size, moe_num_experts and moe_top_k, and
    # JetMoE-8B's published files and their fine-tunes still say so (idoru/jetmoe-8b-
    # ultrainteract-sft-v4). transformers' JetMoeConfig takes none of them and fills in its
    # own 5632, 8 and 2, which are JetMoE-8B's: the same model on those files. Read here as
    # the sizes the checkpoint states, the canonical name winning.
    d_ff = c.req_dim("intermediate_size", "ffn_hidden_size")
    kv_heads = c.req_dim("num_key_value_heads")
    head_dim = c.req_dim("kv_channels", "head_dim")  # JetMoeConfig: head_dim -> kv_channels
    experts = c.req_dim("num_local_experts", "moe_num_experts")
    top_k = c.req_dim("num_experts_per_tok", "moe_top_k")
    # JetMoeConfig sets num_attention_heads = num_key_value_heads x num_experts_per_tok,
    # whatever config.json says.
    heads = kv_heads * top_k
    moa = MixtureOfAttention(heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                             experts=experts, top_k=top_k)
    moe = MoE(experts=experts, active=top_k, expert_d_ff=d_ff)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         extra_params=layers * hidden,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                         notes=[f"mixture of attention heads: {top_k} of {experts} query/output "
                                f"experts a token, {heads} query heads over {kv_heads} cached "
                                "K/V heads; vLLM serves no JetMoE (no engine count)",
                                "the MLP experts' output bias, one d_model vector a layer "
                                "(extra_params)"])
    return with_runs(fields, [Layer(moa, moe, 2)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "jetmoe": jetmoe,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "jetmoe": {"kv_channels": 128, "num_experts_per_tok": 2, "num_key_value_heads": 16,
               "num_local_experts": 8},
}
