"""DeepSeek's latent attention (MLA) and the families read as DeepSeek: DeepSeek-V2/V3
and MiniCPM3 (flat fields), Youtu-LLM (MLA, no experts), DeepSeek-V3.2 and GLM-5
(glm_moe_dsa: MLA with a lightning indexer), DeepSeek-V4, Sarvam-105B (sarvam_mla, built as
DeepSeek-V3 under field names of its own).

Routers whose score-correction bias is a buffer (DeepSeek-V3.2) count no bias.

DeepSeek-V4 (deepseek_v4), read as DeepseekV4Config and its decoder layer in transformers
5.24 read them (`configuration_deepseek_v4.py`, `modeling_deepseek_v4.py`).

Every layer attends over a sliding window of one shared K/V head (kvcalc.layers.compressed);
its "heavily_compressed_attention" (HCA) and "compressed_sparse_attention" (CSA) layers add a
compressor beside it, CSA's with a lightning indexer. Every MLP is routed experts beside one
shared expert (the first layers route by a token-id table instead of a learned top-k: the
same weights). The residual is `hc_mult` streams mixed by manifold-constrained
hyper-connections (mHC: kvcalc.layers.hyper_connections, with the stream-mixing matrix), two per
layer and one head before the final norm.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, core_dims, dense_then_moe, describe,
                                    flat_fields, latent_fields, mtp_note, with_runs)
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers.hyper_connections import HyperConnections
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers.compressed import Compressor, SharedKVAttention
from kvcalc.layers.indexed import IndexedLatent


def deepseek(c: Config) -> dict:
    """DeepSeek-V2/V3: MLA attention, DeepSeekMoE after `first_k_dense_replace` layers."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(
        heads=heads,
        kv_lora_rank=c.req_int("kv_lora_rank"),
        rope_dim=c.req_int("qk_rope_head_dim"),
        nope_dim=c.req_int("qk_nope_head_dim"),
        v_dim=c.req_int("v_head_dim"),
        q_lora_rank=c.opt_int("q_lora_rank", 0) or 0,  # null: full-rank q_proj
        bias=bias,
    )
    notes = [
        "MLA: kv_heads and head_dim describe the query/key heads; the cache holds "
        f"kv_lora_rank + qk_rope_head_dim = {mla.kv_lora_rank + mla.rope_dim} "
        "elements per token per layer"
    ]
    moe, dense_layers = None, 0
    # the expert count's other names in the configuration class: DeepseekV2Config's
    # attribute_map says num_experts, DeepseekV3Config's num_local_experts
    routed = c.opt_int("n_routed_experts", None, *(
        ("num_experts",) if c.model_type == "deepseek_v2" else ("num_local_experts",)))
    if routed:
        freq = c.opt_int("moe_layer_freq", 1)
        if freq != 1:
            raise c.error(f"moe_layer_freq={freq}: only 1 (every layer after the dense ones) "
                          "is supported")
        dense_layers = c.opt_int("first_k_dense_replace", 0) or 0
        moe = MoE(
            experts=routed,
            active=c.req_int("num_experts_per_tok"),
            expert_d_ff=c.req_int("moe_intermediate_size"),
            shared_experts=c.opt_int("n_shared_experts", 0) or 0,
            # DeepSeek-V3's router has a per-expert e_score_correction_bias (noaux_tc
            # routing), which transformers 5 holds as a buffer, not a parameter: it is
            # not counted (256 values a layer). V2's gate is a bias-free Linear.
            router_bias=False,
        )
    mtp = c.opt_int("num_nextn_predict_layers", 0) or 0
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not counted "
                     "(transformers does not load them)")
    return dict(
        layers=layers, d_model=hidden, heads=heads, kv_heads=heads,
        head_dim=mla.nope_dim + mla.rope_dim, v_head_dim=mla.v_dim,
        d_ff=d_ff, vocab=vocab, mlp="gated", norm="rmsnorm", norms_per_layer=2,
        qkv_bias=bias, out_bias=bias,
        # MiniCPM3Config ties the embeddings by default; DeepSeek's configs do not.
        tied_embeddings=c.opt_bool("tie_word_embeddings", family == "minicpm3"),
        max_context=c.opt_int("max_position_embeddings",
                              {"deepseek_v2": 2048, "minicpm3": 32768}.get(family, 4096)) or 0,
        mla=mla, moe=moe, dense_layers=dense_layers, notes=notes,
    )


def youtu(c: Config) -> dict:
    """Youtu-LLM: DeepSeek-V3's MLA in Llama's layer with a dense SwiGLU on every layer
    (the expert fields its config inherits build nothing), tied embeddings."""
    out = deepseek(c)
    return {**out, "moe": None, "dense_layers": 0,
            "tied_embeddings": c.opt_bool("tie_word_embeddings", True),
            "max_context": c.opt_int("max_position_embeddings", 131072) or 0}


def deepseek_v32(c: Config) -> dict:
    """DeepSeek-V3.2 (DeepseekV32Config) and GLM-5 (GlmMoeDsaConfig): DeepSeek-V3's MLA
    with q LoRA always, plus DeepSeek Sparse Attention's lightning indexer and its own key
    cache, on every layer (GLM-5: on its "full" indexer_types layers; a "shared" one
    reuses the previous layer's choice and has no indexer)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = IndexedLatent(
        heads=heads, kv_lora_rank=c.req_int("kv_lora_rank"),
        rope_dim=c.req_int("qk_rope_head_dim"), nope_dim=c.req_int("qk_nope_head_dim"),
        v_dim=c.req_int("v_head_dim"), q_lora_rank=c.req_dim("q_lora_rank"), bias=bias,
        index_heads=c.req_dim("index_n_heads"), index_head_dim=c.req_dim("index_head_dim"),
        index_topk=c.req_dim("index_topk"))
    shared = Latent(heads=heads, kv_lora_rank=mla.kv_lora_rank, rope_dim=mla.rope_dim,
                    nope_dim=mla.nope_dim, v_dim=mla.v_dim, q_lora_rank=mla.q_lora_rank,
                    bias=bias)
    # DeepseekV32Config and GlmMoeDsaConfig: num_local_experts (attribute_map) and
    # num_experts (__post_init__'s legacy name) are n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    mlps = dense_then_moe(c, layers, Dense(d_ff, bias=c.opt_bool("mlp_bias", False)), moe)
    mixers = [mla if t == "full" else shared for t in _indexer_types(c, layers)]
    notes = [f"MLA: the cache holds kv_lora_rank + qk_rope_head_dim = "
             f"{mla.kv_lora_rank + mla.rope_dim} elements per token per layer, and the "
             f"indexer's key {mla.index_token_bytes()} B (fp8 and its scales); attention "
             f"reads the {mla.index_topk:,} tokens the indexer picks", *mtp_note(c)]
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 163840, notes=notes)
    return with_runs(fields, [Layer(m, mlp, 2) for m, mlp in zip(mixers, mlps)])


def _indexer_types(c: Config, layers: int) -> list[str]:
    """GLM-5's per-layer indexer mode, as GlmMoeDsaConfig derives it: `indexer_types`,
    else `index_topk_pattern` (F full, S shared), else every `index_topk_freq`-th layer
    from `index_skip_topk_offset` (2) runs its own indexer. DeepSeek-V3.2: all full."""
    types = c.raw("indexer_types")
    if types is MISSING or types is None:
        pattern = c.raw("index_topk_pattern")
        if isinstance(pattern, str):
            types = [{"F": "full", "S": "shared"}.get(ch, ch) for ch in pattern]
        elif pattern not in (MISSING, None):
            types = pattern
        else:
            every = max(c.opt_int("index_topk_freq", 1) or 1, 1)
            offset = c.opt_int("index_skip_topk_offset", 2) or 0
            return ["full" if max(i - offset + 1, 0) % every == 0 else "shared"
                    for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("full", "shared") for t in types)):
        raise c.error(f"field 'indexer_types' must list {layers} entries, each \"full\" or "
                      f"\"shared\", got {describe(types)}")
    return types


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


def sarvam_mla(c: Config) -> dict:
    """Sarvam-105B (SarvamMLAConfig, built as DeepSeek-V3): MLA with a full-rank query
    projection by default, a dense first layer, then routed experts beside one shared;
    the original config's num_experts and num_shared_experts read as DeepSeek's names."""
    return deepseek(c.renamed({"num_experts": "n_routed_experts",
                               "num_shared_experts": "n_shared_experts",
                               "num_mtp_layers": "num_nextn_predict_layers"}))


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
# glm_moe_dsa: GLM-5: DeepSeek-V3.2's attention, GLM's experts
# deepseek_v4: compressed attention, hyper-connections
    "deepseek_v2": deepseek, "deepseek_v3": deepseek, "minicpm3": deepseek,
    "deepseek_v32": deepseek_v32, "glm_moe_dsa": deepseek_v32, "deepseek_v4": deepseek_v4,
    "sarvam_mla": sarvam_mla, "youtu": youtu,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": {"q_lora_rank": 1536, "n_routed_experts": 64, "n_shared_experts": 2,
                    "kv_lora_rank": 512, "moe_intermediate_size": 1407, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"q_lora_rank": 1536, "n_routed_experts": 256, "n_shared_experts": 1,
                    "first_k_dense_replace": 3, "kv_lora_rank": 512,
                    "moe_intermediate_size": 2048, "num_experts_per_tok": 8,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v32": {"first_k_dense_replace": 3, "index_head_dim": 128, "index_n_heads": 64,
                     "index_topk": 2048, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
                     "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                     "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                     "v_head_dim": 128},
    "glm_moe_dsa": {"first_k_dense_replace": 3, "index_head_dim": 128, "index_n_heads": 32,
                    "index_topk": 2048, "kv_lora_rank": 512, "max_position_embeddings": 202752,
                    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "q_lora_rank": 2048, "qk_nope_head_dim": 192,
                    "qk_rope_head_dim": 64, "v_head_dim": 256},
    "minicpm3": {"kv_lora_rank": 256, "q_lora_rank": 768, "qk_nope_head_dim": 64,
                 "qk_rope_head_dim": 32, "v_head_dim": 64},
    "youtu": {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
              "qk_nope_head_dim": 128, "v_head_dim": 128},
    "sarvam_mla": {"first_k_dense_replace": 1, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
                   "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
                   "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
}
