"""A model_type kvcalc has no adapter for, read as a uniform decoder from the fields most
config.json files share, and marked approximate.

transformers' own configs name a decoder's sizes alike across families (hidden_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
vocab_size): from them the cache of a plain full-attention decoder is exact, and its
parameters are those of a Llama-shaped layer (q/k/v/o without biases, a gated MLP, two
RMSNorms). What such a reading cannot see (windows, latent attention, a family's own
projections or norms) is why it is approximate; the reasons travel with the spec
(`extra["approximate"]`) to the table, the JSON and one line on stderr.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields
from kvcalc.hfconfig.config import MISSING, Config
from kvcalc.layers import MoE

# The fields without which no decoder can be sized: refused (as an unknown model_type)
# when one of them is absent.
USUAL_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# Fields that say the family is not a plain full-attention decoder.
_UNREAD_KEYS = ("sliding_window", "layer_types", "kv_lora_rank", "attention_chunk_size")


def has_usual_fields(c: Config) -> bool:
    """Whether the config names a decoder's sizes as most families do."""
    return all(c.raw(key) not in (MISSING, None) for key in USUAL_FIELDS)


def uniform_decoder(c: Config) -> dict:
    """ModelSpec's fields for an unknown model_type, and the reasons it is approximate."""
    hidden, layers, heads, vocab = (c.req_dim(key) for key in USUAL_FIELDS)
    reasons = [f"model_type {c.model_type!r} has no reader in kvcalc: read as a uniform "
               "Llama-shaped decoder (full attention, q/k/v/o without biases, gated MLP, "
               "RMSNorms)"]
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    d_ff = c.opt_int("intermediate_size", None)
    if d_ff is None:
        d_ff = 4 * hidden
        reasons.append("no intermediate_size: the MLP taken as 4 x hidden_size")
    experts = next((c.opt_int(key, None) for key in _EXPERT_KEYS if c.has(key)), None)
    moe = None
    if experts:
        active = c.opt_int("num_experts_per_tok", None)
        if active is None:
            reasons.append(f"{experts} experts but no num_experts_per_tok: read as dense")
        else:
            moe = MoE(experts=experts, active=active,
                      expert_d_ff=c.opt_int("moe_intermediate_size", None) or d_ff)
            reasons.append("experts on every layer, without shared experts")
    unread = [key for key in _UNREAD_KEYS if c.raw(key) not in (MISSING, None)]
    if unread:
        reasons.append(f"not read: {', '.join(unread)} (every layer keeps every token)")
    return flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                       mlp="gated", norm="rmsnorm", norms_per_layer=2, moe=moe,
                       tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                       max_context=c.opt_int("max_position_embeddings", 0) or 0,
                       notes=[], approximate="; ".join(reasons))
