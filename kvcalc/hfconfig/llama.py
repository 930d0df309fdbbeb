"""Llama and the decoders transformers builds as Llama: `llama_like` reads the oldest
and most used of them (Llama, Mistral, Mixtral, Qwen2/3, Gemma 1/2, Phi-3) into ModelSpec's
flat fields; the others list their layers: Granite, StableLM, Nemotron and PhiMoE
(`llama_variants`), StarCoder2, Llama 4 and Llama 3.2 Vision's decoder (mllama_text_model),
and the Llama-shaped families that differ from it in a few switches only, read through the
shared `decoder` (kvcalc.hfconfig.config): BitNet, Differential Transformer, HyperCLOVA X,
Mellum, Emu3, Seed-OSS, SmolLM3, Apertus and Apertus 1.5, Arcee (AFM), Helium, InternLM3,
IQuest-Coder, EXAONE 3, CWM, Ministral, Jais 2, nanochat, Doge.

Each reads as its configuration class (`configuration_*.py`) and decoder layer
(`modeling_*.py`) in transformers 5.24 do. Qwen's experts and hybrids are
kvcalc.hfconfig.qwen, Gemma 3 and later kvcalc.hfconfig.gemma.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from kvcalc.hfconfig.config import (MISSING, Config, attention, core_dims, decoder, describe,
                                    flat_fields, with_runs)
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, gemma2_window, layer_kinds,
                                         llama4_no_rope, qwen_window)
from kvcalc.layers import Attention, Dense, ImageCrossAttention, Layer, MoE


def llama_like(c: Config) -> dict:
    """Llama, Mistral, Mixtral, Qwen2/3, Gemma/Gemma 2, Phi-3: RoPE, RMSNorm, gated MLP."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    notes: list[str] = []

    if family in ("llama", "phi3"):
        # LlamaConfig / Phi3Config: num_key_value_heads None -> num_attention_heads.
        kv_heads = c.opt_int("num_key_value_heads", heads)
    else:
        kv_heads = c.kv_heads_required(heads)
    # Gemma, Gemma 2 and Qwen3 config classes default head_dim to a fixed number
    # (256, 256, 128), not hidden // heads: require it rather than guess.
    head_dim = c.head_dim(hidden, heads, required=family in ("gemma", "gemma2", "qwen3"))

    out: dict[str, Any] = dict(
        layers=layers, d_model=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        d_ff=d_ff, vocab=vocab, mlp="gated", norm="rmsnorm", norms_per_layer=2,
    )
    tied_default = family in ("gemma", "gemma2")  # GemmaConfig/Gemma2Config: True
    out["tied_embeddings"] = c.opt_bool("tie_word_embeddings", tied_default)
    out["max_context"] = c.opt_int("max_position_embeddings", {
        "llama": 2048, "mistral": 4096 * 32, "mixtral": 4096 * 32, "qwen2": 32768,
        "qwen3": 32768, "gemma": 8192, "gemma2": 8192, "phi3": 4096,
    }[family]) or 0

    # Biases, as each modeling file builds its projections.
    if family == "llama":
        bias = c.opt_bool("attention_bias", False)  # q, k, v and o
        out.update(qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False))
    elif family == "qwen2":
        # Qwen2Attention: q/k/v bias=True, o_proj bias=False.
        out.update(qkv_bias=True, out_bias=False)
    elif family in ("qwen3", "gemma", "gemma2"):
        bias = c.opt_bool("attention_bias", False)  # q, k, v and o
        out.update(qkv_bias=bias, out_bias=bias)
    # mistral, mixtral, phi3: bias=False hard-coded in the modeling code.

    if family == "qwen3":
        out["qk_norm"] = True  # q_norm, k_norm: RMSNorm(head_dim) each
    if family == "gemma2":
        # input, post_attention, pre_feedforward, post_feedforward layernorms.
        out["norms_per_layer"] = 4

    # Sliding windows: only where the attention code applies them.
    sw, every = 0, 0
    if family == "mistral":
        # MistralConfig defaults sliding_window to 4096 (Mistral-7B-v0.1's value).
        value = c.raw("sliding_window")
        if value is MISSING:
            raise c.missing("sliding_window", " (write null for full attention)")
        sw = 0 if value is None else c.check_int("sliding_window", value)
    elif family in ("mixtral", "phi3"):
        # Default None; when set, every layer's attention uses it.
        sw = c.opt_int("sliding_window", 0) or 0
    elif family in ("qwen2", "qwen3"):
        sw, every, note = qwen_window(c, layers)
        if note:
            notes.append(note)
    elif family == "gemma2":
        sw, every, note = gemma2_window(c, layers)
        if note:
            notes.append(note)
    out.update(sliding_window=sw, global_every=every if sw else 0)

    if family == "mixtral":
        experts = c.req_int("num_local_experts")
        out["moe"] = MoE(
            experts=experts,
            active=c.req_int("num_experts_per_tok"),
            expert_d_ff=d_ff,  # each expert is a w1/w3/w2 gated MLP of intermediate_size
            router_bias=False,  # gate: Linear(hidden, num_local_experts, bias=False)
        )
    out["notes"] = notes
    return out


def llama_variants(c: Config) -> dict:
    """Granite, GraniteMoE, StableLM, Nemotron, PhiMoE: Llama-shaped decoders with their
    own norms (StableLM/Nemotron/PhiMoE LayerNorms with bias), MLP kind and MoE."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    if family == "nemotron":
        kv_heads = c.kv_heads_required(heads)
    else:
        kv_heads = c.opt_int("num_key_value_heads", heads)
    if family == "nemotron":
        # NemotronConfig: head_dim, else hidden_size // num_attention_heads rounded down
        # (Minitron-8B: 48 heads of 128 in 4096; without head_dim the class builds 48 of 85)
        head_dim = c.opt_int("head_dim", None) or hidden // heads
    else:
        head_dim = c.head_dim(hidden, heads)
    layernorm = family in ("stablelm", "nemotron", "phimoe")
    bias = c.opt_bool("use_qkv_bias" if family == "stablelm" else "attention_bias", False)
    out_bias = False if family == "stablelm" else bias
    qk = 0
    norms = 2
    notes: list[str] = []
    if family == "stablelm":
        if c.opt_bool("qk_layernorm", False):
            qk = (heads + kv_heads) * head_dim  # a bias-free LayerNorm per head, q and k
        if c.opt_bool("use_parallel_residual", False):
            norms = 1
            notes.append("parallel residual: attention and MLP share the input LayerNorm")
    mlp_bias = c.opt_bool("mlp_bias", False)
    if family in ("granitemoe", "phimoe"):
        mlp = MoE(experts=c.req_int("num_local_experts"), active=c.req_int("num_experts_per_tok"),
                  expert_d_ff=d_ff)
    elif family == "nemotron":
        mlp = Dense(d_ff, gated=False, bias=mlp_bias)  # up, down with squared ReLU
    else:
        mlp = Dense(d_ff, gated=True, bias=mlp_bias)
    window = c.opt_int("sliding_window", 0) or 0 if family == "phimoe" else 0
    attn = attention("sliding" if window else "full", window, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim, qkv_bias=bias, out_bias=out_bias, qk_norm=qk)
    extra = vocab if family == "phimoe" and c.opt_bool("lm_head_bias", False) else 0
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=out_bias, mlp_bias=mlp_bias,
                         norm="layernorm" if layernorm else "rmsnorm", norm_bias=layernorm,
                         norms_per_layer=norms, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                         notes=notes)
    return with_runs(fields, [Layer(attn, mlp, norms)] * layers)


def starcoder2(c: Config) -> dict:
    """StarCoder2: GQA with biases (use_bias), plain biased MLP, LayerNorms, optional window."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    bias = c.opt_bool("use_bias", True)
    window = c.opt_int("sliding_window", 0) or 0
    kind = "sliding" if window else "full"
    attn = attention(kind, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     qkv_bias=bias, out_bias=bias)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=bias, qkv_bias=bias, out_bias=bias,
                         norm="layernorm", norm_bias=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                         notes=[])
    return with_runs(fields, [Layer(attn, Dense(d_ff, False, bias), 2)] * layers)


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


# MllamaTextConfig: cross_attention_layers None -> these (Llama 3.2 Vision 11B's, of 40)
_MLLAMA_CROSS_LAYERS = (3, 8, 13, 18, 23, 28, 33, 38)


def mllama_text(c: Config) -> dict:
    """Mllama's language model (Llama 3.2 Vision): Llama layers, and at
    cross_attention_layers a layer that only cross-attends to the image's tokens (q/k
    RMSNorms, tanh gates on attention and MLP) and keeps their K/V; 8 extra embedding rows."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = hidden // heads  # MllamaTextSelfAttention / CrossAttention
    cross_at = c.raw("cross_attention_layers")
    if cross_at is MISSING or cross_at is None:
        cross_at = _MLLAMA_CROSS_LAYERS
    if not isinstance(cross_at, list | tuple):
        raise c.error("field 'cross_attention_layers' must be a list of layer indices")
    cross_at = {c.check_int("cross_attention_layers", i) for i in cross_at}
    from kvcalc.layers import NoMixer  # a state kind, loaded on first use (not for Llama)

    mlp = Dense(d_ff)
    self_layer = Layer(Attention(heads, kv_heads, head_dim), mlp, 2)
    # no self-attention in a cross layer: its mixer caches nothing, its cross-attention
    # keeps the vision tokens' K/V (transformers: that layer's DynamicCache entry)
    cross_layer = Layer(NoMixer(), mlp, 2, cross=ImageCrossAttention(
        heads, kv_heads, head_dim, qk_norm=2 * head_dim))
    layer_list = [cross_layer if i in cross_at else self_layer for i in range(layers)]
    crosses = sum(1 for layer in layer_list if layer.cross is not None)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         # embed_tokens: vocab_size + 8 rows; two tanh gates a cross layer
                         extra_params=8 * hidden + 2 * crosses,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=[f"{crosses} cross-attention layers keep the image's tokens "
                                "(the encoder length), not the text's; embed_tokens has "
                                "vocab_size + 8 rows and each cross layer two gates "
                                "(extra_params)"])
    return with_runs(fields, layer_list)


def bitnet(c: Config) -> dict:
    """BitNet b1.58: Llama with an RMSNorm before o_proj (attn_sub_norm, hidden_size wide)
    and one before down_proj (ffn_sub_norm, intermediate_size wide)."""
    layers = c.req_dim("num_hidden_layers")
    d_ff = c.req_dim("intermediate_size")
    bias = c.opt_bool("attention_bias", False)
    # three hidden-wide norms a layer (input, post-attention, attn_sub_norm); the MLP's
    # sub-norm is intermediate_size wide
    return decoder(c, qkv_bias=bias, out_bias=bias, norms=3, extra_params=layers * d_ff,
                   context=2048,
                   notes=("ffn_sub_norm: an intermediate_size RMSNorm a layer "
                          "(extra_params)",))


def diffllama(c: Config) -> dict:
    """DiffLlama (Differential Transformer): Llama whose attention subtracts two softmax
    maps, weighted by four learned head_dim vectors a layer (lambda_q1/k1/q2/k2); K and V
    cached as Llama's."""
    hidden, layers, heads = (c.req_dim(k) for k in ("hidden_size", "num_hidden_layers",
                                                    "num_attention_heads"))
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, extra_params=layers * 4 * head_dim,
                   context=2048,
                   notes=("differential attention: lambda_q1, lambda_k1, lambda_q2, "
                          "lambda_k2 (head_dim each) per layer (extra_params)",))


def hyperclovax(c: Config) -> dict:
    """HyperCLOVA X: Llama (Granite's multipliers) with attention_bias and mlp_bias, and
    norms after attention and MLP as well when use_post_norm (four a layer)."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   norms=4 if c.opt_bool("use_post_norm", True) else 2, context=2048)


def _mlp_layer_types(c: Config, layers: int) -> list[bool]:
    """Which layers are sparse: `mlp_layer_types` ("sparse"/"dense"), else every one
    (MellumConfig)."""
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        return [True] * layers
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    return [t == "sparse" for t in types]


def mellum(c: Config) -> dict:
    """Mellum: full and sliding layers by layer_types, per-head q/k RMSNorms, routed experts
    (moe_intermediate_size, no shared expert) on the "sparse" layers of mlp_layer_types;
    its multi-token-prediction layer is not built by transformers (not counted)."""
    layers = c.req_dim("num_hidden_layers")
    sparse = _mlp_layer_types(c, layers)
    # MellumConfig's attribute_map: num_experts is num_local_experts, num_mtp_layers
    # num_nextn_predict_layers (saved under the second names)
    moe = MoE(experts=c.req_int("num_local_experts", "num_experts"),
              active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size")) if any(sparse) else None
    bias = c.opt_bool("attention_bias", False)
    mtp = c.opt_int("num_nextn_predict_layers", 0, "num_mtp_layers") or 0
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True,
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES, lambda: ["full"] * layers),
                   experts=lambda dense: [moe if s else dense for s in sparse],
                   context=131072,
                   notes=(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not "
                          "counted (transformers does not build them)",) if mtp else ())


def emu3_text(c: Config) -> dict:
    """Emu3's language model (emu3_text_model, the text_config of emu3): Llama with
    attention_bias and mlp_bias over a vocabulary of text and vision tokens."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   context=9216)


def seed_oss(c: Config) -> dict:
    """Seed-OSS: q/k/v biases (attention_bias), o_proj's its own (attention_out_bias)."""
    return decoder(c, qkv_bias=c.opt_bool("attention_bias", True),
                   out_bias=c.opt_bool("attention_out_bias", False),
                   mlp_bias=c.opt_bool("mlp_bias", False), context=524288)


def smollm3(c: Config) -> dict:
    """SmolLM3: Llama with NoPE on every no_rope_layer_interval-th layer (no cache change);
    sliding layers only where layer_types (or use_sliding_window) says."""
    layers = c.req_dim("num_hidden_layers")
    slide = c.opt_bool("use_sliding_window", False) and c.opt_int("sliding_window", None)

    def older() -> list[str]:
        every = c.opt_int("no_rope_layer_interval", 4) or 4
        # SmolLM3Config: a NoPE layer slides when use_sliding_window and a window are set.
        return ["sliding" if slide and (i + 1) % every == 0 else "full" for i in range(layers)]

    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES, older), tied=True,
                   context=32768)


def apertus(c: Config) -> dict:
    """Apertus: a plain up/down MLP with xIELU (two learned scalars a layer), q/k
    RMSNorms, attention and feed-forward norms."""
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, gated=False, qk_norm=True,
                   context=65536, extra_params=2 * layers,
                   notes=("xIELU activation: alpha_p and alpha_n per layer (extra_params)",))


def apertus1p5_text(c: Config) -> dict:
    """Apertus 1.5's language model: Apertus with a vocabulary extended by visual and audio
    codes, and an output head that may keep only the first output_vocab_size rows."""
    out = apertus(c)
    rows = c.opt_int("output_vocab_size", None)
    if rows is None or rows == out["vocab"]:
        return out
    if not 1 <= rows <= out["vocab"]:
        raise c.error(f"output_vocab_size must be 1..vocab_size ({out['vocab']:,}), got {rows:,}")
    if out["tied_embeddings"]:
        raise c.error("output_vocab_size: a pruned output head cannot be tied to the input "
                      "embeddings (set tie_word_embeddings to false)")
    # vocab is the head's (the logits' width); the input table's other rows are counted apart
    unread = (out["vocab"] - rows) * out["d_model"]
    return {**out, "vocab": rows, "extra_params": out["extra_params"] + unread,
            "notes": [*out["notes"], f"output head pruned to {rows:,} rows; the input "
                      f"embedding's {out['vocab'] - rows:,} other rows ({unread:,} parameters) "
                      "counted in extra_params"]}


def arcee(c: Config) -> dict:
    """Arcee (AFM): Llama with a plain up/down MLP (ReLU squared)."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False),
                   gated=False)


def helium(c: Config) -> dict:
    """Helium: Llama with q/k/v biases only when attention_bias (o_proj never)."""
    return decoder(c, qkv_bias=c.opt_bool("attention_bias", False),
                   mlp_bias=c.opt_bool("mlp_bias", False))


def llama_biased(c: Config) -> dict:
    """Llama with attention_bias on q/k/v/o and mlp_bias on the MLP (InternLM3,
    IQuest-Coder, EXAONE 3)."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", False))


def exaone(c: Config) -> dict:
    """EXAONE 3: Llama with attention_bias and mlp_bias, its checkpoints' own field names
    read as ExaoneConfig's attribute_map reads them."""
    # EXAONE 3.0/3.5's files say num_layers, layer_norm_epsilon and activation_function
    # (LGAI-EXAONE's remote-code ExaoneConfig); transformers' ExaoneConfig maps them to
    # num_hidden_layers, rms_norm_eps and hidden_act
    return llama_biased(c.renamed({"num_layers": "num_hidden_layers",
                                   "layer_norm_epsilon": "rms_norm_eps",
                                   "activation_function": "hidden_act"}))


def cwm(c: Config) -> dict:
    """CWM (Code World Model): Llama with layer_types (three sliding layers to one
    global) and mlp_bias; its attention has no biases (attention_bias is not read)."""
    layers = c.req_dim("num_hidden_layers")
    return decoder(c, mlp_bias=c.opt_bool("mlp_bias", False),
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES,
                                     lambda: ["full" if i % 4 == 0 else "sliding"
                                              for i in range(layers)]),
                   context=131072)


def ministral(c: Config) -> dict:
    """Ministral: Mistral with layer_types (every layer sliding when a window is set)."""
    layers = c.req_dim("num_hidden_layers")

    def older() -> list[str]:
        return ["full" if c.raw("sliding_window") is None else "sliding"] * layers

    return decoder(c, kinds=layer_kinds(c, layers, ATTENTION_TYPES, older), context=131072,
                   head_dim_required=True)


def jais2(c: Config) -> dict:
    """Jais 2: Llama's attention with biases (attention_bias, on by default), a plain
    up/down MLP with squared ReLU and biases (mlp_bias), LayerNorms with biases."""
    bias = c.opt_bool("attention_bias", True)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=c.opt_bool("mlp_bias", True),
                   gated=False, layernorm=True, context=8192)


def nanochat(c: Config) -> dict:
    """nanochat: Qwen3's attention (q/k norms) and a plain up/down MLP (squared ReLU), every
    norm an RMSNorm without weights (none counted, the final one neither)."""
    bias = c.opt_bool("attention_bias", False)
    out = decoder(c, qkv_bias=bias, out_bias=bias, gated=False, norms=0, context=2048)
    return {**out, "final_norm": False}


def doge(c: Config) -> dict:
    """Doge: GQA with per-head q/k norms and a dynamic mask (a learned A and dt_proj per
    K/V head), a learned scale on each residual; with is_moe, a shared SwiGLU beside
    num_experts single-neuron experts picked through a product-key router."""
    hidden, layers, heads = (c.req_dim(k) for k in ("hidden_size", "num_hidden_layers",
                                                    "num_attention_heads"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    # A, dt_proj (K/V width to one logit a K/V head), the two residual scales
    extra = layers * (kv_heads + kv_heads * head_dim * kv_heads + (kv_heads if bias else 0)
                      + 2 * hidden)
    mlp_bias = c.opt_bool("mlp_bias", False)
    window = c.opt_int("sliding_window", 0) or 0  # DogeConfig: set, every layer slides
    kinds = ["sliding" if window else "full"] * layers
    notes = ["dynamic mask: A and dt_proj per K/V head, residual scales (extra_params)"]
    experts = None
    if c.opt_bool("is_moe", False):
        routed = c.req_dim("num_experts")
        # DogeCDMoE: each expert a d_model-wide down and up embedding (an MLP one neuron
        # wide); the router scores floor(sqrt(num_experts)) keys twice
        moe = MoE(experts=routed, active=c.req_dim("num_experts_per_tok"), expert_d_ff=1,
                  gated=False, gated_shared=True, shared_experts=1,
                  shared_d_ff=c.req_dim("intermediate_size"),
                  router_width=2 * math.isqrt(routed))
        experts = lambda dense: [moe] * layers  # noqa: E731
        if mlp_bias:  # the shared SwiGLU is the dense MLP: mlp_bias gives it biases
            extra += layers * (2 * moe.shared_d_ff + hidden)
            notes.append("mlp_bias: the shared SwiGLU's biases (extra_params)")
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=mlp_bias, qk_norm=True,
                   kinds=kinds, context=2048, extra_params=extra, notes=tuple(notes),
                   experts=experts)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "llama": llama_like, "mistral": llama_like, "mixtral": llama_like, "qwen2": llama_like,
    "qwen3": llama_like, "gemma": llama_like, "gemma2": llama_like, "phi3": llama_like,
    "llama4_text": llama4, "starcoder2": starcoder2, "granite": llama_variants,
    "granitemoe": llama_variants, "bitnet": bitnet, "diffllama": diffllama,
    "hyperclovax": hyperclovax, "mellum": mellum, "emu3_text_model": emu3_text,
    "stablelm": llama_variants, "nemotron": llama_variants, "phimoe": llama_variants,
    "seed_oss": seed_oss, "smollm3": smollm3, "apertus": apertus, "arcee": arcee,
    "helium": helium, "ministral": ministral, "ministral3": ministral, "cwm": cwm,
    "internlm3": llama_biased, "iquestcoder": llama_biased, "exaone": exaone,
    "apertus1p5_text": apertus1p5_text, "mllama_text_model": mllama_text, "jais2": jais2,
    "nanochat": nanochat, "doge": doge,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "starcoder2": {"num_key_value_heads": 2},
    "gemma": {"head_dim": 256, "num_key_value_heads": 16},
    "gemma2": {"head_dim": 256, "num_key_value_heads": 4, "sliding_window": 4096},
    "granite": {"max_position_embeddings": 2048},
    "granitemoe": {"max_position_embeddings": 2048, "num_experts_per_tok": 2,
                   "num_local_experts": 8},
    "bitnet": {"num_key_value_heads": 5},
    "mellum": {"head_dim": 128, "moe_intermediate_size": 896, "num_experts_per_tok": 8,
               "num_key_value_heads": 4, "num_local_experts": 64, "sliding_window": 1024},
    "emu3_text_model": {"num_key_value_heads": 8},
    "llama4_text": {"num_experts_per_tok": 1, "num_key_value_heads": 8, "num_local_experts": 16},
    "ministral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "ministral3": {"num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144},
    "cwm": {"num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
            "sliding_window": 8192},
    "internlm3": {"num_key_value_heads": 2, "head_dim": 128, "max_position_embeddings": 32768},
    "iquestcoder": {"num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072},
    "exaone": {"num_key_value_heads": 8, "head_dim": 128},
    "mistral": {"num_key_value_heads": 8, "sliding_window": 4096},
    "mixtral": {"num_experts_per_tok": 2, "num_key_value_heads": 8, "num_local_experts": 8},
    "phimoe": {"max_position_embeddings": 131072, "num_experts_per_tok": 2,
               "num_key_value_heads": 8, "num_local_experts": 16},
    "qwen2": {"num_key_value_heads": 32},
    "qwen3": {"head_dim": 128, "num_key_value_heads": 32},
    "seed_oss": {"head_dim": 128, "num_key_value_heads": 8},
    "smollm3": {"num_key_value_heads": 4},
    "mllama_text_model": {"num_key_value_heads": 8},
    "doge": {"num_experts": 16384, "num_experts_per_tok": 64},
}
