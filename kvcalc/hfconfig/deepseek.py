"""DeepSeek-V4 (deepseek_v4), read as DeepseekV4Config and its decoder layer in transformers
5.24 read them (`configuration_deepseek_v4.py`, `modeling_deepseek_v4.py`).

Every layer attends over a sliding window of one shared K/V head (kvcalc.layers_compressed);
its "heavily_compressed_attention" (HCA) and "compressed_sparse_attention" (CSA) layers add a
compressor beside it, CSA's with a lightning indexer. Every MLP is routed experts beside one
shared expert (the first layers route by a token-id table instead of a learned top-k: the
same weights). The residual is `hc_mult` streams mixed by manifold-constrained
hyper-connections (mHC: kvcalc.hyper_connections, with the stream-mixing matrix), two per
layer and one head before the final norm.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, describe
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.hyper_connections import HyperConnections
from kvcalc.layers import Layer, MoE
from kvcalc.layers_compressed import Compressor, SharedKVAttention

# DeepseekV4Config's defaults for the sizes its reader takes (its class values)
_RATES = {"csa": 4, "hca": 128}  # default_compress_rates
_TYPE_KINDS = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
               "heavily_compressed_attention": "hca"}
_RATE_KEYS = {"compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}
_LEGACY_RATIOS = {0: "sliding", 4: "csa", 128: "hca"}  # _COMPRESS_RATIO_TO_LAYER_TYPE


def _rates(c: Config) -> dict[str, int]:
    """compress_rates by kvcalc kind: the dict, else the legacy compress_rate_csa / _hca,
    else the class's 4 and 128 (DeepseekV4Config.__post_init__ folds them in that way)."""
    rates = dict(_RATES)
    value = c.raw("compress_rates")
    if value not in (MISSING, None):
        if not isinstance(value, dict):
            raise c.error(f"field 'compress_rates' must be an object, got {describe(value)}")
        for name, kind in _RATE_KEYS.items():
            if name in value:
                rates[kind] = c.check_int(f"compress_rates.{name}", value[name])
    for kind in ("csa", "hca"):
        legacy = c.opt_int(f"compress_rate_{kind}", None)
        if legacy is not None:
            rates[kind] = legacy
    for kind, rate in rates.items():
        if rate <= 0:
            raise c.error(f"the {kind.upper()} compress rate must be positive, got {rate}")
    return rates


def _kinds(c: Config, layers: int) -> list[str]:
    """Each layer's attention: layer_types, else the legacy per-layer compress_ratios (0,
    4, 128), else the class's pattern: two HCA layers, then HCA and CSA alternating."""
    def older() -> list[str]:
        ratios = c.raw("compress_ratios")
        if ratios in (MISSING, None):
            return ["hca" if i < 2 or i % 2 == 0 else "csa" for i in range(layers)]
        if (not isinstance(ratios, list) or len(ratios) < layers
                or any(r not in _LEGACY_RATIOS for r in ratios)):
            raise c.error(f"field 'compress_ratios' must list {layers} entries, each 0, 4 "
                          f"or 128, got {describe(ratios)}")
        return [_LEGACY_RATIOS[r] for r in ratios[:layers]]

    return layer_kinds(c, layers, _TYPE_KINDS, older)


def deepseek_v4(c: Config) -> dict:
    """DeepSeek-V4: one shared K/V head over a sliding window on every layer, compressed
    attention beside it (HCA; CSA with a lightning indexer), a grouped low-rank output,
    routed experts beside one shared expert on every layer, and hyper-connections (mHC)
    over hc_mult residual streams."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    head_dim = c.opt_int("head_dim", 512) or 512
    q_rank = c.opt_int("q_lora_rank", 1024) or 1024
    window = c.opt_int("sliding_window", 128) or 128
    d_ff = c.opt_int("moe_intermediate_size", 2048) or 2048
    attn = SharedKVAttention(heads=heads, kv_heads=1, head_dim=head_dim, kind="sliding",
                             window=window, sinks=True, q_lora_rank=q_rank,
                             o_groups=c.opt_int("o_groups", 8) or 8,
                             o_lora_rank=c.opt_int("o_lora_rank", 1024) or 1024)
    rates = _rates(c)
    compressors = {
        "sliding": None,
        "hca": Compressor(heads=heads, head_dim=head_dim, rate=rates["hca"],
                          q_lora_rank=q_rank),
        "csa": Compressor(heads=heads, head_dim=head_dim, rate=rates["csa"], overlap=True,
                          q_lora_rank=q_rank,
                          index_heads=c.opt_int("index_n_heads", 64) or 64,
                          index_head_dim=c.opt_int("index_head_dim", 128) or 128,
                          index_topk=c.opt_int("index_topk", 512) or 512),
    }
    # DeepseekV4SparseMoeBlock builds one shared DeepseekV4MLP of moe_intermediate_size,
    # whatever n_shared_experts says; a hash-routed layer's router has the same weight
    moe = MoE(experts=c.opt_int("n_routed_experts", 256) or 256,
              active=c.opt_int("num_experts_per_tok", 6) or 6, expert_d_ff=d_ff,
              shared_experts=1)
    mhc = HyperConnections(c.opt_int("hc_mult", 4) or 4, comb=True)
    layer_list = [Layer(attn, moe, 2, beside=compressors[k]) for k in _kinds(c, layers)]
    notes = [f"one K/V head of {head_dim} (K = V) for the last {window:,} tokens on every "
             f"layer; HCA layers also one entry per {rates['hca']:,} tokens, CSA layers one "
             f"per {rates['csa']:,} and the indexer's; each compressed layer keeps the "
             "tokens since its last entry (at most the rate), counted as a constant state; "
             "the per-token and no-window figures count a compressed entry a token (a decode "
             "step writes at most one), the cache at a length is exact",
             f"hyper-connections over {mhc.streams} residual streams: "
             f"{mhc.params(hidden, layers):,} parameters (fp32), counted apart from the "
             "layers' matmuls"]
    mtp = c.opt_int("num_nextn_predict_layers", 1) or 0
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not "
                     "counted (transformers does not build them)")
    fields = flat_fields(hidden, layers, heads, 1, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 1048576) or 0,
                         hyper_connections=mhc, notes=notes)
    return with_runs(fields, layer_list)
