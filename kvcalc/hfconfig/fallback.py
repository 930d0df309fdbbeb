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

from kvcalc.hfconfig.config import MISSING, Config, flat_fields
from kvcalc.layers import MoE

# The fields without which no decoder can be sized: refused (as an unknown model_type)
# when one of them is absent.
USUAL_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# Fields that say the family is not a plain full-attention decoder, but whose cache a
# uniform decoder bounds from above (every layer keeps every token): read as approximate.
_UNREAD_KEYS = ("sliding_window", "layer_types", "attention_chunk_size")

# Fields that change the cache or the weights in a way a reader that ignores them gets
# wrong in both directions: a config that carries one (not null) and whose reader did not
# read it is refused, never guessed. The reason is the error's.
REFUSED_UNREAD = {
    # multi-head latent attention (DeepSeek-V2/V3, Kimi K2, MiniCPM3, ...)
    "kv_lora_rank": "latent attention: the cache holds one kv_lora_rank + qk_rope_head_dim "
                    "latent per token, not K and V of every head",
    "q_lora_rank": "latent attention's low-rank query (q_a_proj, q_b_proj)",
    "qk_rope_head_dim": "latent attention's RoPE part of each query/key head",
    "qk_nope_head_dim": "latent attention's NoPE part of each query/key head",
    "v_head_dim": "value heads of their own width (attention weights and cache)",
    # latent MoE: experts in a narrower latent, projected into it and back
    "moe_latent_size": "latent MoE: experts in a narrower latent, with projections into and "
                       "out of it",
    "routed_expert_hidden_size": "latent MoE: routed experts in a narrower latent, with "
                                 "projections into and out of it",
    # per-layer patterns of layers of other kinds
    "linear_attn_config": "linear-attention (state) layers beside attention layers",
    "block_types": "a block pattern of recurrent and attention layers",
    "layers_block_type": "a block pattern of state-space and attention layers",
    "hybrid_override_pattern": "a block pattern of state-space, attention and MoE layers",
    "attn_type_list": "a per-layer pattern of linear and softmax attention",
    "full_attn_idxs": "a per-layer pattern of linear and full attention",
    "attn_layer_indices": "a per-layer pattern of state-space and attention layers",
    # weights a uniform decoder does not have
    "attn_res_block_size": "attention residuals: per-layer residual norms and projections",
    "n_layers_per_attn_res_block": "attention residuals: per-layer residual norms and "
                                   "projections",
    "index_topk": "a sparse-attention indexer with a key cache of its own",
    "compress_ratios": "compressed attention: layers that cache one entry per group of tokens",
    # per-layer blocks searched one by one (Nemotron-NAS / DeciLM, Llama-3.3-Nemotron-Super)
    "block_configs": "blocks of their own per layer: attention skipped, shared or with fewer "
                     "K/V heads, MLP widths that vary by layer",
}
# layer_types entries a uniform decoder bounds (an overestimate of a sliding layer): any
# other kind (linear attention, state-space, ...) is a layer pattern it cannot read.
_PLAIN_LAYER_TYPES = ("full_attention", "sliding_attention")


def unread_fields(c: Config) -> list[str]:
    """The fields of REFUSED_UNREAD the config gives (not null) that its reader never
    asked for (Config.asked), and a layer_types of kinds other than full and sliding."""
    out = [key for key in REFUSED_UNREAD
           if c.cfg.get(key) is not None and key not in c.asked]
    types = c.cfg.get("layer_types")
    if ("layer_types" not in c.asked and isinstance(types, list)
            and any(t not in _PLAIN_LAYER_TYPES for t in types)):
        out.append("layer_types")
    return out


def refuse_unread(c: Config, lead: str) -> None:
    """Raise, in one line, when the reader left fields of REFUSED_UNREAD unread: `lead`
    says which config and which reader, the reasons what the answer would have got wrong."""
    unread = unread_fields(c)
    if not unread:
        return
    reasons = "; ".join(
        f"{key} ({REFUSED_UNREAD.get(key, 'layers of kinds other than full and sliding attention')})"
        for key in unread)
    raise c.error(f"{lead} would not read fields that change the cache or the weights: "
                  f"{reasons}; refused rather than guessed")


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
