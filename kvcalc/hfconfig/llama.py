"""Llama-shaped decoders: RoPE, RMSNorm or LayerNorm, q/k/v/o projections, a gated or
plain MLP, sometimes windows or experts.

`llama_like` reads the oldest and most used of them (Llama, Mistral, Mixtral, Qwen2/3,
Gemma 1/2, Phi-3) into ModelSpec's flat fields; the others list their layers (Gemma 3,
Cohere, OLMo, StarCoder2, Granite, StableLM, Nemotron, PhiMoE).
"""

from __future__ import annotations

from typing import Any

from kvcalc.hfconfig.build import attention, flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims
from kvcalc.hfconfig.layer_types import (ATTENTION_TYPES, gemma2_window, layer_kinds,
                                         qwen_window, required_window,
                                         sliding_window_pattern)
from kvcalc.layers import Attention, Dense, Layer, MoE


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


def gemma3(c: Config) -> dict:
    """Gemma 3 (Gemma3TextConfig): 5 sliding : 1 global by default (sliding_window_pattern
    6: layer i slides when (i + 1) % 6), q/k RMSNorms, four norms per layer, tied."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, ATTENTION_TYPES, lambda: sliding_window_pattern(c, layers, 6))
    window = required_window(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    mlp = Dense(d_ff, gated=True)
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias, qk_norm=2 * head_dim), mlp, 4)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         mlp="gated", norm="rmsnorm", norms_per_layer=4,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=[])
    return with_runs(fields, layer_list)


def cohere(c: Config) -> dict:
    """Cohere (Command R) and Cohere2 (Command R7B): one weight-only LayerNorm per layer
    (attention and MLP in parallel), tied embeddings; Cohere2 slides on 3 of 4 layers."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    qk = (heads + kv_heads) * head_dim if c.opt_bool("use_qk_norm", False) else 0
    if family == "cohere2":
        kinds = layer_kinds(c, layers, ATTENTION_TYPES,
                            lambda: sliding_window_pattern(c, layers, 4))
    else:
        kinds = ["full"] * layers
    window = required_window(c) if "sliding" in kinds else 0
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=bias, out_bias=bias, qk_norm=qk), Dense(d_ff), 1)
                  for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         norm="layernorm", norm_bias=False, norms_per_layer=1,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["attention and MLP in parallel, one LayerNorm per layer"])
    return with_runs(fields, layer_list)


def olmo(c: Config) -> dict:
    """OLMo: LayerNorms without parameters. OLMo 2: no input norm, post-attention and
    post-feedforward RMSNorms, q/k RMSNorms over all heads' width."""
    family = c.model_type
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    bias = c.opt_bool("attention_bias", False)
    if family == "olmo":
        attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias)
        norms, final = 0, False
    else:
        attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                         qk_norm=(heads + kv_heads) * head_dim)
        norms, final = 2, True
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, norms_per_layer=norms, final_norm=final,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=["OLMo's LayerNorms have no parameters"] if family == "olmo"
                         else [])
    return with_runs(fields, [Layer(attn, Dense(d_ff), norms)] * layers)


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
