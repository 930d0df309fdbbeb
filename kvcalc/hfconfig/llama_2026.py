"""Llama-shaped decoders released 2024-2026 that transformers 5 builds: GLM (GLM-4-9B-0414,
GLM-4-32B), Seed-OSS, ERNIE 4.5, EXAONE 4, SmolLM3, Apertus, Arcee (AFM), Helium,
Hunyuan dense, Ministral, OLMo 3, Apertus 1.5, Jais 2, nanochat, Doge.

Each differs from Llama in a few switches only (which projections carry biases, a plain
or gated MLP, q/k norms, extra norms per layer, sliding layers); `decoder` builds the
layers from those switches, and each family's adapter reads them as its configuration
class (`configuration_*.py`) and decoder layer (`modeling_*.py`) in transformers 5.24 do.
"""

from __future__ import annotations

import math
from typing import Callable

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import Config, core_dims
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, every_nth_full, layer_kinds,
                                         required_window)
from kvcalc.layers import Dense, Layer, MoE


def decoder(c: Config, *, qkv_bias: bool = False, out_bias: bool = False,
            mlp_bias: bool = False, gated: bool = True, qk_norm: bool = False,
            norms: int = 2, kinds: list[str] | None = None, tied: bool = False,
            context: int = 4096, extra_params: int = 0, notes: tuple[str, ...] = (),
            experts: Callable[[int], list] | None = None,
            head_dim_required: bool = False, layernorm: bool = False,
            sinks: bool = False) -> dict:
    """A Llama-shaped decoder: `kinds` per layer (default all full), q/k RMSNorms over
    one head's width when `qk_norm`, `norms` d_model-wide norms per layer (LayerNorms with
    a bias when `layernorm`, else RMSNorms); `experts`, given the dense MLP, returns each
    layer's MLP (a MoE family's sparse layers); `sinks`, one learned sink logit per query
    head in every layer."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads  # null: one per query head
    # A class whose head_dim defaults to None and whose attention reads it as it is
    # (Hunyuan, Ministral) cannot build a model without it: required there.
    head_dim = c.head_dim(hidden, heads, required=head_dim_required)
    kinds = kinds or ["full"] * layers
    window = required_window(c) if "sliding" in kinds else 0
    qk = 2 * head_dim if qk_norm else 0
    mlp = Dense(d_ff, gated=gated, bias=mlp_bias)
    mlps = experts(mlp) if experts else [mlp] * layers
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=qkv_bias, out_bias=out_bias, qk_norm=qk,
                                  sinks=sinks), m, norms)
                  for k, m in zip(kinds, mlps)]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         mlp="gated" if gated else "plain", mlp_bias=mlp_bias,
                         qkv_bias=qkv_bias, out_bias=out_bias, qk_norm=qk_norm,
                         norms_per_layer=norms, extra_params=extra_params,
                         norm="layernorm" if layernorm else "rmsnorm", norm_bias=layernorm,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", tied),
                         max_context=c.opt_int("max_position_embeddings", context) or 0,
                         notes=list(notes))
    return with_runs(fields, layer_list)


def glm(c: Config) -> dict:
    """GLM (glm-4-9b-chat-hf) and GLM-4 (GLM-4-9B/32B-0414): biased q/k/v, a fused
    gate_up MLP; GLM-4 adds post-attention and post-MLP norms (four a layer)."""
    return decoder(c, qkv_bias=c.opt_bool("attention_bias", True),
                   norms=4 if c.model_type == "glm4" else 2, context=131072)


def seed_oss(c: Config) -> dict:
    """Seed-OSS: q/k/v biases (attention_bias), o_proj's its own (attention_out_bias)."""
    return decoder(c, qkv_bias=c.opt_bool("attention_bias", True),
                   out_bias=c.opt_bool("attention_out_bias", False),
                   mlp_bias=c.opt_bool("mlp_bias", False), context=524288)


def ernie4_5(c: Config) -> dict:
    """ERNIE 4.5 dense: use_bias on every projection, tied embeddings by default."""
    bias = c.opt_bool("use_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied=True, context=131072)


def exaone4(c: Config) -> dict:
    """EXAONE 4: sliding layers and a global one every sliding_window_pattern (4), q/k
    RMSNorms, the norms after attention and MLP only (no input norm)."""
    return decoder(c, qk_norm=True, kinds=exaone4_kinds(c), context=2048)


def exaone4_kinds(c: Config) -> list[str]:
    """EXAONE 4's (and K-EXAONE's) layer kinds: layer_types, else a global layer every
    sliding_window_pattern-th (4), none when the window is null (Exaone4Config)."""
    layers = c.req_dim("num_hidden_layers")

    def older() -> list[str]:
        if c.raw("sliding_window") is None:
            return ["full"] * layers  # Exaone4Config: a null window, no sliding layer
        return every_nth_full(layers, c.opt_int("sliding_window_pattern", 4) or 4)

    return layer_kinds(c, layers, ATTENTION_TYPES, older)


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


def cwm(c: Config) -> dict:
    """CWM (Code World Model): Llama with layer_types (three sliding layers to one
    global) and mlp_bias; its attention has no biases (attention_bias is not read)."""
    layers = c.req_dim("num_hidden_layers")
    return decoder(c, mlp_bias=c.opt_bool("mlp_bias", False),
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES,
                                     lambda: ["full" if i % 4 == 0 else "sliding"
                                              for i in range(layers)]),
                   context=131072)


def vaultgemma(c: Config) -> dict:
    """VaultGemma: Gemma 2's sliding/global layers with two norms per layer, tied
    embeddings."""
    layers = c.req_dim("num_hidden_layers")
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, tied=True, context=8192,
                   kinds=layer_kinds(c, layers, ATTENTION_TYPES,
                                     lambda: ["sliding", "full"] * (layers // 2)
                                     + ["sliding"] * (layers % 2)))


def hunyuan_dense(c: Config) -> dict:
    """Hunyuan dense (HunYuanDenseV1): Llama with per-head q/k RMSNorms."""
    bias = c.opt_bool("attention_bias", False)
    return decoder(c, qkv_bias=bias, out_bias=bias, qk_norm=True, context=2048,
                   head_dim_required=True)


def ministral(c: Config) -> dict:
    """Ministral: Mistral with layer_types (every layer sliding when a window is set)."""
    layers = c.req_dim("num_hidden_layers")

    def older() -> list[str]:
        return ["full" if c.raw("sliding_window") is None else "sliding"] * layers

    return decoder(c, kinds=layer_kinds(c, layers, ATTENTION_TYPES, older), context=131072,
                   head_dim_required=True)


def olmo3(c: Config) -> dict:
    """OLMo 3: OLMo 2's layer (q/k norms over all heads, post-attention and
    post-feedforward norms) with three sliding layers to one global."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = hidden // heads
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: every_nth_full(layers, 4))
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias,
                                  qk_norm=(heads + kv_heads) * head_dim), Dense(d_ff), 2)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


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
