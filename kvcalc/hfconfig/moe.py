"""Mixture-of-experts decoders, and DeepSeek's latent attention (MLA), which comes with
its experts: DeepSeek-V2/V3 and MiniCPM3 (flat fields), Youtu-LLM (MLA, no experts),
Qwen2/3-MoE and OLMoE, gpt-oss, Llama 4 (layer by layer).
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, every_nth_full, layer_kinds,
                                         llama4_no_rope, required_window)
from kvcalc.layers import Attention, Dense, Latent, Layer, MoE


def sparse_layers(c: Config, layers: int) -> list[bool]:
    """Qwen2/3-MoE, OLMoE-style: layer i is sparse unless listed in mlp_only_layers, when
    num_experts > 0 and (i + 1) % decoder_sparse_step == 0 (Qwen*MoeDecoderLayer)."""
    only = c.raw("mlp_only_layers")
    only = [] if only is MISSING or only is None else only
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise c.error("field 'mlp_only_layers' must be a list of layer indices")
    step = c.opt_int("decoder_sparse_step", 1) or 1
    experts = c.opt_int("num_experts", 0) or 0
    return [i not in only and experts > 0 and (i + 1) % step == 0 for i in range(layers)]


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


_OLMO_MOE = ("olmoe", "flex_olmo")  # experts on every layer, of intermediate_size


def qwen_moe(c: Config) -> dict:
    """Qwen2-MoE / Qwen3-MoE / OLMoE / FlexOlmo: routed experts of moe_intermediate_size on
    the sparse layers; Qwen2-MoE adds a gated shared expert; Qwen3 and OLMoE q/k norms
    (FlexOlmo: OLMoE's experts and q/k norms, OLMo 2's norms after attention and MLP)."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    if family in _OLMO_MOE:
        sparse = [True] * layers
        experts = c.req_int("num_experts")
        expert_ff = d_ff
    else:
        sparse = sparse_layers(c, layers)
        experts = c.opt_int("num_experts", 0) or 0
        expert_ff = c.req_int("moe_intermediate_size") if experts else d_ff
    shared = 0
    shared_ff = 0
    if family == "qwen2_moe":
        shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
        shared = 1 if shared_ff else 0
    qkv_bias = c.opt_bool("qkv_bias", True) if family == "qwen2_moe" else c.opt_bool(
        "attention_bias", False)
    out_bias = False if family == "qwen2_moe" else qkv_bias
    # OLMoE's q_norm is hidden_size wide, FlexOlmo's num_attention_heads x head_dim
    qk = {"qwen3_moe": 2 * head_dim, "olmoe": hidden + kv_heads * head_dim,
          "flex_olmo": (heads + kv_heads) * head_dim}.get(family, 0)
    moe = MoE(experts=experts, active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=shared, shared_d_ff=shared_ff, shared_gate=bool(shared)) if experts else None
    dense = Dense(d_ff)
    if family not in _OLMO_MOE and c.opt_bool("use_sliding_window", False):
        raise c.error("use_sliding_window is true: sliding layers in MoE Qwen configs are "
                      "not supported")
    attn = Attention(heads=heads, kv_heads=kv_heads, head_dim=head_dim, qkv_bias=qkv_bias,
                     out_bias=out_bias, qk_norm=qk)
    layer_list = [Layer(attn, moe if (s and moe) else dense, 2) for s in sparse]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=qkv_bias, out_bias=out_bias, qk_norm=bool(qk),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def gpt_oss(c: Config) -> dict:
    """gpt-oss: alternating sliding (128) and full layers, per-head attention sinks,
    biased q/k/v/o, every layer MoE with biased router and experts."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    # GptOssConfig: sliding on even layers, full on odd.
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: every_nth_full(layers, 2))
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", True)
    moe = MoE(experts=c.req_int("num_local_experts"),
              active=c.req_int("num_experts_per_tok", "experts_per_token"),
              expert_d_ff=d_ff, router_bias=True, expert_bias=True)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias, sinks=True), moe, 2)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=["attention sinks: one learned logit per query head "
                                "(parameters, not cached tokens)"])
    return with_runs(fields, layer_list)


def llama4(c: Config) -> dict:
    """Llama 4 text model: chunked local attention on RoPE layers (no_rope_layers: 1 =
    RoPE, default every 4th layer NoPE and global), MoE on moe_layers (default every
    interleave_moe_layer_step-th), a shared expert, dense layers of intermediate_size_mlp."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: llama4_no_rope(c, layers))
    chunk = c.opt_int("attention_chunk_size", 8192)
    if "chunked" in kinds and not chunk:
        kinds = ["full"] * layers  # no chunk size: every layer attends globally
    moe_at = c.raw("moe_layers")
    if moe_at is MISSING or moe_at is None:
        step = c.opt_int("interleave_moe_layer_step", 1) or 1
        moe_at = list(range(step - 1, layers, step))
    bias = c.opt_bool("attention_bias", False)
    moe = MoE(experts=c.req_int("num_local_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=1)
    dense = Dense(c.opt_int("intermediate_size_mlp", 16384) or d_ff)
    layer_list = [Layer(attention(k, chunk or 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias),
                        moe if i in moe_at else dense, 2) for i, k in enumerate(kinds)]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096 * 32) or 0,
                         notes=[f"chunked local attention ({chunk:,}-token chunks) on RoPE "
                                "layers, global attention on NoPE layers"] if chunk else [])
    return with_runs(fields, layer_list)
