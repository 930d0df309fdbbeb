"""Mixture-of-experts decoders released 2024-2026 that transformers 5 builds: GLM-4.5/4.6/
4.7 (glm4_moe), GLM-4.7-Flash (glm4_moe_lite), DeepSeek-V3.2 and GLM-5 (MLA with a
lightning indexer), MiniMax-M2, DBRX, ERNIE 4.5 MoE, Hunyuan 3 (hy_v3), A.X K1 (axk1).

Read as each family's configuration class and decoder layer in transformers 5.24 read
them. Routers whose score-correction bias is a buffer (GLM-4.5, DeepSeek-V3.2,
MiniMax-M2) count no bias; ERNIE 4.5's is a parameter, one value per expert.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, latent_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe
from kvcalc.hfconfig.llama_2026 import decoder
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers_indexed import IndexedLatent


def _mtp_note(c: Config, key: str = "num_nextn_predict_layers") -> list[str]:
    mtp = c.opt_int(key, 0) or 0
    return [f"{mtp} multi-token-prediction layer(s) in the checkpoint are not counted "
            "(transformers does not build them)"] if mtp else []


def _dense_then_moe(c: Config, layers: int, dense: Dense, moe: MoE, first: int = 0) -> list:
    """Each layer's MLP: `mlp_layer_types` ("dense"/"sparse") when listed, else dense
    for the first `first_k_dense_replace` layers (absent: `first`) and experts after."""
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        first = c.opt_int("first_k_dense_replace", first) or 0
        return [dense if i < first else moe for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    return [moe if t == "sparse" else dense for t in types]


def glm4_moe(c: Config) -> dict:
    """GLM-4.5/4.6/4.7 (Glm4MoeConfig): GQA with biased q/k/v (attention_bias) and
    optional per-head q/k norms, dense layers then routed + shared experts."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // heads), rounded down.
    head_dim = c.opt_int("head_dim", None) or hidden // heads
    bias = c.opt_bool("attention_bias", False)
    qk = 2 * head_dim if c.opt_bool("use_qk_norm", False) else 0
    # Glm4MoeConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qkv_bias=bias, qk_norm=qk)
    mlps = _dense_then_moe(c, layers, Dense(d_ff), moe)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, qk_norm=bool(qk),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=_mtp_note(c))
    return with_runs(fields, [Layer(attn, mlp, 2) for mlp in mlps])


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
    mlps = _dense_then_moe(c, layers, Dense(d_ff, bias=c.opt_bool("mlp_bias", False)), moe)
    mixers = [mla if t == "full" else shared for t in _indexer_types(c, layers)]
    notes = [f"MLA: the cache holds kv_lora_rank + qk_rope_head_dim = "
             f"{mla.kv_lora_rank + mla.rope_dim} elements per token per layer, and the "
             f"indexer's key {mla.index_token_bytes()} B (fp8 and its scales); attention "
             f"reads the {mla.index_topk:,} tokens the indexer picks", *_mtp_note(c)]
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


def glm4_moe_lite(c: Config) -> dict:
    """GLM-4.7-Flash (Glm4MoeLiteConfig): DeepSeek-V3's MLA and routed + shared experts,
    the first layer dense unless mlp_layer_types says otherwise."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    # Glm4MoeLiteConfig's attribute_map: head_dim is qk_rope_head_dim
    mla = Latent(heads=heads, kv_lora_rank=c.req_int("kv_lora_rank"),
                 rope_dim=c.req_int("qk_rope_head_dim", "head_dim"),
                 nope_dim=c.req_int("qk_nope_head_dim"),
                 v_dim=c.req_int("v_head_dim"), q_lora_rank=c.opt_int("q_lora_rank", 0) or 0,
                 bias=bias)
    # Glm4MoeLiteConfig's attribute_map: num_local_experts is n_routed_experts
    moe = MoE(experts=c.req_int("n_routed_experts", "num_local_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    mlps = _dense_then_moe(c, layers, Dense(d_ff), moe, first=1)
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 202752,
                           notes=_mtp_note(c))
    return with_runs(fields, [Layer(mla, mlp, 2) for mlp in mlps])


def minimax_m2(c: Config) -> dict:
    """MiniMax-M2 (M2, M2.1, M2.5): GQA with q/k RMSNorms over all heads' width, every
    layer 256 experts of intermediate_size, no shared expert."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    moe = MoE(experts=c.req_int("num_local_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff)
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qk_norm=(heads + kv_heads) * head_dim)
    mtp = c.opt_int("num_mtp_modules", 0) or 0
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 196608) or 0,
                         notes=[f"{mtp} multi-token-prediction module(s) in the checkpoint "
                                "are not counted (transformers does not build them)"]
                         if mtp else [])
    return with_runs(fields, [Layer(attn, moe, 2)] * layers)


def dbrx(c: Config) -> dict:
    """DBRX: fused Wqkv without biases, bias-free LayerNorms, every layer experts
    (ffn_config) of gated w1/v1/w2; K/V heads in attn_config."""
    hidden = c.req_dim("d_model")
    layers = c.req_dim("n_layers")
    heads = c.req_dim("n_heads")
    vocab = c.req_dim("vocab_size")
    attn_cfg, ffn_cfg = (_sub(c, key) for key in ("attn_config", "ffn_config"))
    # DbrxAttentionConfig / DbrxFFNConfig defaults: one K/V head, 4 experts, top 1, 3584.
    kv_heads = attn_cfg.opt_int("kv_n_heads", 1) or 1
    d_ff = ffn_cfg.opt_int("ffn_hidden_size", 3584) or 3584
    moe = MoE(experts=ffn_cfg.opt_int("moe_num_experts", 4) or 4,
              active=ffn_cfg.opt_int("moe_top_k", 1) or 1, expert_d_ff=d_ff)
    if hidden % heads:
        raise c.error(f"d_model ({hidden}) is not divisible by n_heads ({heads})")
    head_dim = hidden // heads
    attn = attention("full", 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    max_len = c.opt_int("max_seq_len", 2048) or 0
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=max_len, notes=[])
    return with_runs(fields, [Layer(attn, moe, 2)] * layers)


def _sub(c: Config, key: str) -> Config:
    """A nested config (DBRX's attn_config, ffn_config), read with the same checks."""
    value = c.raw(key)
    if value is MISSING or value is None:
        value = {}  # the class's own defaults
    if not isinstance(value, dict):
        raise c.error(f"field {key!r} must be an object, got {describe(value)}")
    return Config(value, c.model_type, f"{c.where}: {key}")


def ernie4_5_moe(c: Config) -> dict:
    """ERNIE 4.5 MoE: use_bias on attention and dense MLPs, experts on every
    moe_layer_interval-th layer from moe_layer_start_index to moe_layer_end_index (-1:
    the last), shared experts, a learned per-expert score correction."""
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("use_bias", False)
    experts = c.opt_int("moe_num_experts", 0) or 0
    start = c.opt_int("moe_layer_start_index", 1) or 0
    end = c.opt_int("moe_layer_end_index", -1)
    end = layers - 1 if end is None or end == -1 else end
    every = c.opt_int("moe_layer_interval", 1) or 1
    sparse = [experts > 0 and (i + 1) % every == 0 and start <= i <= end for i in range(layers)]

    def mlps(dense: Dense) -> list:
        if not any(sparse):
            return [dense] * layers
        moe = MoE(experts=experts, active=c.req_int("moe_k"),
                  expert_d_ff=c.req_int("moe_intermediate_size"),
                  shared_experts=c.opt_int("moe_num_shared_experts", 0) or 0,
                  router_bias=True)  # gate.weight and moe_statics.e_score_correction_bias
        return [moe if s else dense for s in sparse]

    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied=True, context=131072,
                   experts=mlps)


def hunyuan_moe(c: Config) -> dict:
    """Hunyuan MoE (HunYuanMoEV1, Hunyuan-A13B): Hunyuan dense's attention (per-head q/k
    RMSNorms), every layer num_experts experts of intermediate_size (moe_topk of them a
    token, one number or the same for every layer) beside one shared MLP of that width."""
    layers = c.req_dim("num_hidden_layers")
    topk = c.raw("moe_topk", "num_experts_per_tok")
    if isinstance(topk, list) and topk and all(t == topk[0] for t in topk):
        topk = topk[0]  # Hunyuan-A13B lists it per layer
    if topk is MISSING or topk is None:
        topk = 1  # HunYuanMoEV1Config's default
    active = c.check_int("moe_topk", topk)
    bias = c.opt_bool("attention_bias", False)

    def mlps(dense: Dense) -> list:
        moe = MoE(experts=c.opt_int("num_experts", 1) or 1, active=active,
                  expert_d_ff=dense.d_ff, shared_experts=1)
        return [moe] * layers

    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, context=2048,
                   head_dim_required=True, experts=mlps)


def hy_v3(c: Config) -> dict:
    """Hunyuan 3 (HYV3): GQA with per-head q/k norms, a dense first layer (mlp_layer_types),
    then num_experts routed experts (sigmoid router, its correction bias a buffer) beside
    one shared MLP num_shared_experts x moe_intermediate_size wide."""
    d_ff = c.req_dim("intermediate_size")
    hidden = c.req_dim("hidden_size")
    shared = c.opt_int("num_shared_experts", 1) or 0
    expert_ff = c.req_dim("moe_intermediate_size")
    # HYV3MLP takes `intermediate_size or config.intermediate_size`: no shared experts
    # still builds a shared MLP, as wide as the dense one
    shared_ff = shared * expert_ff or d_ff
    moe = MoE(experts=c.req_dim("num_experts", "num_local_experts"),
              active=c.req_dim("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=1, shared_d_ff=shared_ff)
    dense = Dense(d_ff, bias=c.opt_bool("mlp_bias", False))
    mlps = _dense_then_moe(c, c.req_dim("num_hidden_layers"), dense, moe, first=1)
    extra, notes = 0, ()
    if dense.bias:  # the shared MLP is a dense one: mlp_bias gives it biases too
        extra = sum(m is moe for m in mlps) * (2 * shared_ff + hidden)
        notes = (f"mlp_bias: the shared experts' biases ({extra:,}) in extra_params",)
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=dense.bias, qk_norm=True,
                   context=131072, experts=lambda _: mlps, extra_params=extra, notes=notes)


def axk1(c: Config) -> dict:
    """A.X K1 (AXK1): DeepSeek-V3's MLA, always with a q LoRA, and routed + shared experts
    whose block ends in its own norm (post_mlp_layernorm: three norms on a sparse layer),
    the first layer dense unless mlp_layer_types says otherwise."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.req_dim("kv_lora_rank"),
                 rope_dim=c.req_dim("qk_rope_head_dim"), nope_dim=c.req_dim("qk_nope_head_dim"),
                 v_dim=c.req_dim("v_head_dim"), q_lora_rank=c.req_dim("q_lora_rank"), bias=bias)
    moe = MoE(experts=c.req_dim("n_routed_experts"), active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=c.req_dim("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    dense = Dense(d_ff)
    if c.raw("mlp_layer_types") in (MISSING, None):
        # AXK1Config's legacy fields: sparse from first_k_dense_replace (1), every
        # moe_layer_freq-th (1) layer
        first = c.opt_int("first_k_dense_replace", 1) or 0
        every = c.opt_int("moe_layer_freq", 1) or 1
        mlps = [moe if i >= first and i % every == 0 else dense for i in range(layers)]
    else:
        mlps = _dense_then_moe(c, layers, dense, moe)
    fields = latent_fields(c, mla, hidden, layers, d_ff, vocab, bias, 32768,
                           notes=_mtp_note(c))
    return with_runs(fields, [Layer(mla, mlp, 3 if mlp is moe else 2) for mlp in mlps])
