"""More mixture-of-experts decoders that transformers 5 builds: dots.llm1 (dots1), JetMoE
(jetmoe: experts in attention too), Command A MoE (cohere2_moe), K-EXAONE (exaone_moe),
LongCat-Flash (longcat_flash: two MLA sublayers a block, zero-computation experts), ZAYA1
(zaya: compressed convolutional attention, kvcalc.layers_cca).

Read as each family's configuration class and decoder layer in transformers 5.24 read
them. Their routers' score-correction biases (dots1, K-EXAONE) are buffers, not counted;
a shared expert of width n x w is counted as n experts of width w (the same weights).
"""

from __future__ import annotations

from kvcalc.hfconfig.build import attention, flat_fields, latent_fields, with_runs
from kvcalc.hfconfig.config import Config, core_dims
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, layer_kinds, required_window
from kvcalc.hfconfig.llama_2026 import decoder, exaone4_kinds
from kvcalc.hfconfig.moe_2026 import _dense_then_moe, _mtp_note
from kvcalc.layers import Dense, Latent, Layer, MoE
from kvcalc.layers_cca import ConvolvedAttention
from kvcalc.layers_moa import MixtureOfAttention


def dots1(c: Config) -> dict:
    """dots.llm1 (Dots1Config): Qwen3's attention (per-head q/k RMSNorms), DeepSeek-V3's
    experts (routed + shared) after first_k_dense_replace dense layers; layers from
    max_window_layers on slide when a window is set (layer_types first)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)

    def older() -> list[str]:
        # Dots1Config: a window and i >= max_window_layers (62) -> sliding, whatever
        # use_sliding_window says (it reads no such field)
        if c.raw("sliding_window") is None:
            return ["full"] * layers
        first = c.opt_int("max_window_layers", layers) or 0
        return ["sliding" if i >= first else "full" for i in range(layers)]

    kinds = layer_kinds(c, layers, ATTENTION_TYPES, older)
    moe = MoE(experts=c.req_int("n_routed_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"),
              shared_experts=c.opt_int("n_shared_experts", 0) or 0)
    first = c.opt_int("first_k_dense_replace", 0) or 0
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, kinds=kinds, context=2048,
                   experts=lambda dense: [dense if i < first else moe for i in range(layers)])


def cohere2_moe(c: Config) -> dict:
    """Command A MoE (Cohere2MoeConfig): Cohere 2's parallel block (one norm a layer,
    attention and MLP side by side), dense prefix layers then routed experts of
    intermediate_size and optional shared ones; sliding layers by sliding_window_pattern,
    the dense prefix's by prefix_dense_sliding_window_pattern (layer_types first)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    # Cohere2MoeConfig takes first_k_dense_replace in place of the two lists, and keeps
    # only the lists it derives from it.
    first = c.opt_int("first_k_dense_replace", 0) or 0

    def older() -> list[str]:
        prefix = c.opt_int("prefix_dense_sliding_window_pattern", 1) or 1
        every = c.opt_int("sliding_window_pattern", 4) or 4
        return (["sliding" if (i + 1) % prefix else "full" for i in range(first)]
                + ["sliding" if (i + 1) % every else "full" for i in range(layers - first)])

    kinds = layer_kinds(c, layers, ATTENTION_TYPES, older)
    window = required_window(c) if "sliding" in kinds else 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=c.opt_int("num_shared_experts", 0) or 0)
    dense = Dense(c.opt_int("prefix_dense_intermediate_size", None) or d_ff)
    mlps = _dense_then_moe(c, layers, dense, moe, first=first)
    bias = c.opt_bool("attention_bias", False)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias), mlp, 1)
                  for k, mlp in zip(kinds, mlps)]
    # An RMSNorm when rms_norm_eps is set, else a bias-free LayerNorm: one weight either way.
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False, norms_per_layer=1,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["attention and MLP in parallel, one norm per layer"])
    return with_runs(fields, layer_list)


def exaone_moe(c: Config) -> dict:
    """K-EXAONE (ExaoneMoeConfig): EXAONE 4's attention (q/k RMSNorms, three sliding
    layers to one global), dense layers (mlp_layer_types, else the first
    first_k_dense_replace) then routed + shared experts."""
    layers = c.req_dim("num_hidden_layers")

    def mlps(dense: Dense) -> list:
        moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
                  expert_d_ff=c.req_int("moe_intermediate_size"),
                  shared_experts=c.opt_int("num_shared_experts", 0) or 0)
        return _dense_then_moe(c, layers, dense, moe, first=1)

    return decoder(c, qk_norm=True, kinds=exaone4_kinds(c), context=2048, experts=mlps,
                   notes=tuple(_mtp_note(c)))


def jetmoe(c: Config) -> dict:
    """JetMoE: a mixture of attention heads (top-k of num_local_experts query/output
    experts over one shared K/V projection of num_key_value_heads x kv_channels) and a
    mixture of gated MLP experts, each block with an output bias."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("intermediate_size")
    kv_heads = c.req_dim("num_key_value_heads")
    head_dim = c.req_dim("kv_channels", "head_dim")  # JetMoeConfig: head_dim -> kv_channels
    experts, top_k = c.req_dim("num_local_experts"), c.req_dim("num_experts_per_tok")
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


def zaya(c: Config) -> dict:
    """ZAYA1: compressed convolutional attention (CCA: q/k convolved over time, values half
    delayed a token) on every layer, full or sliding (layer_types "hybrid", "hybrid_sliding");
    num_experts SwiGLU experts, top 1 (or a skip expert), routed by an MLP that carries its
    state from layer to layer; learned scales and biases on each residual."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in ("hidden_size", "num_hidden_layers",
                                                           "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.req_dim("head_dim")
    kinds = layer_kinds(c, layers, {"hybrid": "full", "hybrid_sliding": "sliding"},
                        lambda: ["full"] * layers)
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    experts = c.req_dim("num_experts")
    rank = c.req_dim("router_hidden_size")
    # ZayaRouter: its down projection (d_model -> router_hidden_size) is MoE's router; the
    # rest apart: that projection's bias, the carried state's scale (not on layer 0), and
    # ZayaRouterMLP (a norm, two biased rank x rank layers, rank -> experts + skip)
    router_rest = rank + rank + 2 * (rank * rank + rank) + rank * (experts + 1)
    moe = MoE(experts=experts, active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=c.req_dim("moe_intermediate_size"), router_width=rank)
    extra = (layers * (router_rest + 8 * hidden)  # and the residual scalings' 2 x 4 vectors
             + (layers - 1) * rank  # router_states_scale
             + 2 * hidden  # input_hidden_states_scale and _bias
             + (vocab if c.opt_bool("lm_head_bias", False) else 0))
    t0, t1 = (c.opt_int(k, 2) or 2 for k in ("cca_time0", "cca_time1"))
    layer_list = [Layer(ConvolvedAttention(heads, kv_heads, head_dim, kind=k,
                                           window=window if k == "sliding" else 0,
                                           qkv_bias=bias, out_bias=bias, conv_time0=t0,
                                           conv_time1=t1), moe, 2) for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, moe.expert_d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=["the router MLP past its first projection, the residual "
                                "scalings and the input scaling (extra_params); vLLM serves "
                                "no ZAYA (no engine count)"])
    return with_runs(fields, layer_list)
