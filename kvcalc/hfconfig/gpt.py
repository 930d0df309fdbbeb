"""GPT-2-lineage decoders: learned, rotary or ALiBi positions, LayerNorms with bias,
biased projections and a plain MLP, often attention and MLP in parallel; and OpenAI's
gpt-oss.

GPT-2, GPT-BigCode, GPT-NeoX, OPT and Falcon are read into ModelSpec's flat fields;
Phi-1/2, GPT-J, BLOOM, GPT-Neo and MPT list their layers. The older ones (2019-2023:
CTRL, XGLM, BioGPT, GPT-NeoX-Japanese, Persimmon, GIT's text decoder; CodeGen, read as
GPT-J) list their layers as transformers 5.24 builds them; every layer caches full K/V
for every head, as a plain DynamicCache.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import (Config, attention, core_dims, flat_fields, required_window,
                                    with_runs)
from kvcalc.hfconfig.layer_types import ATTENTION_TYPES, every_nth_full, layer_kinds
from kvcalc.layers import Attention, Dense, Layer, MoE


def gpt2_like(c: Config) -> dict:
    """GPT-2 and GPT-BigCode: learned positions, Conv1D/Linear with biases, plain MLP."""
    family = c.model_type
    hidden = c.req_dim("n_embd", "hidden_size")
    heads = c.req_dim("n_head", "num_attention_heads")
    positions = c.req_int("n_positions", "max_position_embeddings")
    inner = c.opt_int("n_inner", None)
    if family == "gpt_bigcode":
        # GPTBigCodeConfig: multi_query defaults to True (one shared K/V head).
        kv_heads = 1 if c.opt_bool("multi_query", True) else heads
    else:
        kv_heads = heads
    return dict(
        layers=c.req_dim("n_layer", "num_hidden_layers"), d_model=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=hidden // heads,
        d_ff=inner if inner is not None else 4 * hidden,  # n_inner: None -> 4 * n_embd
        vocab=c.req_dim("vocab_size"), mlp="plain",
        qkv_bias=True, out_bias=True, mlp_bias=True,
        norm="layernorm", norm_bias=True, norms_per_layer=2,
        tied_embeddings=c.opt_bool("tie_word_embeddings", True),
        learned_pos=positions, max_context=positions,
    )


def gpt_neox(c: Config) -> dict:
    """GPT-NeoX / Pythia: rotary, fused qkv with bias, untied embed_out by default."""
    hidden = c.req_dim("hidden_size")
    heads = c.req_dim("num_attention_heads")
    attn_bias = c.opt_bool("attention_bias", True)  # query_key_value and dense
    notes = []
    if c.opt_bool("use_parallel_residual", True):
        notes.append("parallel residual: attention and MLP read separate LayerNorms")
    return dict(
        layers=c.req_dim("num_hidden_layers"), d_model=hidden, heads=heads, kv_heads=heads,
        head_dim=hidden // heads, d_ff=c.req_dim("intermediate_size"),
        vocab=c.req_dim("vocab_size"), mlp="plain",
        qkv_bias=attn_bias, out_bias=attn_bias, mlp_bias=True,
        norm="layernorm", norm_bias=True, norms_per_layer=2,
        tied_embeddings=c.opt_bool("tie_word_embeddings", False),
        max_context=c.opt_int("max_position_embeddings", 2048) or 0,
        notes=notes,
    )


def opt(c: Config) -> dict:
    """OPT: learned positions with an offset of 2 rows, ReLU MLP, biases (enable_bias)."""
    hidden = c.req_dim("hidden_size")
    heads = c.req_dim("num_attention_heads")
    positions = c.req_int("max_position_embeddings")
    proj = c.opt_int("word_embed_proj_dim", hidden)
    if proj != hidden:
        raise c.error(
            f"word_embed_proj_dim={proj} differs from hidden_size={hidden}: OPT's "
            "project_in/project_out layers are not supported"
        )
    bias = c.opt_bool("enable_bias", True)
    affine = c.opt_bool("layer_norm_elementwise_affine", True)
    final = c.opt_bool("do_layer_norm_before", True) and not c.opt_bool(
        "_remove_final_layer_norm", False)
    return dict(
        layers=c.req_dim("num_hidden_layers"), d_model=hidden, heads=heads, kv_heads=heads,
        head_dim=hidden // heads, d_ff=c.req_dim("ffn_dim"), vocab=c.req_dim("vocab_size"),
        mlp="plain", qkv_bias=bias, out_bias=bias, mlp_bias=bias,
        norm="layernorm", norm_bias=True, norms_per_layer=2 if affine else 0,
        final_norm=final and affine,
        tied_embeddings=c.opt_bool("tie_word_embeddings", True),
        # OPTLearnedPositionalEmbedding: Embedding(max_position_embeddings + 2, d); the
        # first two rows are an offset kept from fairseq.
        learned_pos=positions + 2, max_context=positions,
    )


def falcon(c: Config) -> dict:
    """Falcon (FalconConfig / modeling_falcon.py): RoPE or ALiBi, LayerNorm with bias."""
    hidden = c.req_dim("hidden_size", "n_embed")
    layers = c.req_dim("num_hidden_layers", "n_layer")
    heads = c.req_dim("num_attention_heads", "n_head")
    vocab = c.req_dim("vocab_size")
    new_arch = c.opt_bool("new_decoder_architecture", False)
    multi_query = c.opt_bool("multi_query", True)
    parallel = c.opt_bool("parallel_attn", True)
    notes: list[str] = []
    # FalconAttention: new architecture -> num_kv_heads (None -> heads);
    # else multi_query -> 1; else all heads.
    if new_arch:
        kv_heads = c.opt_int("num_kv_heads", heads)
        if kv_heads != heads:
            notes.append(f"transformers' Falcon repeats K/V to all {heads} query heads before "
                         f"caching ({heads // kv_heads}x these figures); serving engines keep "
                         f"the {kv_heads} K/V heads counted here")
    elif multi_query:
        kv_heads = 1
    else:
        kv_heads = heads
    # FalconDecoderLayer: sequential blocks have input and post-attention norms;
    # parallel ones one shared norm, or ln_attn + ln_mlp when num_ln_in_parallel_attn
    # is 2 (the default for new_decoder_architecture).
    n_ln = c.opt_int("num_ln_in_parallel_attn", 2 if new_arch else None)
    if not parallel:
        norms = 2
    elif n_ln == 2:
        norms = 2
    else:
        norms = 1
        notes.append("parallel attention and MLP share one input LayerNorm")
    bias = c.opt_bool("bias", False)
    ffn = c.opt_int("ffn_hidden_size", None)
    return dict(
        layers=layers, d_model=hidden, heads=heads, kv_heads=kv_heads,
        head_dim=hidden // heads, d_ff=ffn if ffn is not None else 4 * hidden, vocab=vocab,
        mlp="plain", qkv_bias=bias, out_bias=bias, mlp_bias=bias,
        norm="layernorm", norm_bias=True, norms_per_layer=norms,
        tied_embeddings=c.opt_bool("tie_word_embeddings", True),
        max_context=c.opt_int("max_position_embeddings", 2048) or 0,
        notes=notes,
    )


def phi(c: Config) -> dict:
    """Phi-1/2: parallel attention and MLP after one LayerNorm, biases everywhere, a
    biased lm_head."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    qk = 2 * head_dim * 2 if c.opt_bool("qk_layernorm", False) else 0  # LayerNorm w + b, q and k
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=True, out_bias=True, qk_norm=qk)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                         norm="layernorm", norm_bias=True, norms_per_layer=1,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         extra_params=vocab,  # lm_head bias
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=["parallel attention and MLP share one LayerNorm; "
                                "lm_head has a bias"])
    return with_runs(fields, [Layer(attn, Dense(d_ff, gated=False, bias=True), 1)] * layers)


def gptj(c: Config) -> dict:
    """GPT-J: bias-free q/k/v/out, biased fc_in/fc_out, one LayerNorm per layer
    (parallel), a biased lm_head."""
    hidden = c.req_dim("n_embd", "hidden_size")
    layers = c.req_dim("n_layer", "num_hidden_layers")
    heads = c.req_dim("n_head", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    inner = c.opt_int("n_inner", None)
    d_ff = inner if inner is not None else 4 * hidden
    head_dim = hidden // heads
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=True, norm="layernorm", norm_bias=True,
                         norms_per_layer=1,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         extra_params=vocab,  # lm_head bias
                         max_context=c.opt_int("n_positions", 2048) or 0,
                         notes=["parallel attention and MLP share one LayerNorm; "
                                "lm_head has a bias"])
    layer = Layer(Attention(heads, heads, head_dim), Dense(d_ff, False, True), 1)
    return with_runs(fields, [layer] * layers)


def bloom(c: Config) -> dict:
    """BLOOM: ALiBi, a LayerNorm right after the embedding, fused biased qkv, tied."""
    hidden = c.req_dim("hidden_size", "n_embed")
    layers = c.req_dim("n_layer", "num_hidden_layers")
    heads = c.req_dim("n_head", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    head_dim = hidden // heads
    attn = Attention(heads, heads, head_dim, qkv_bias=True, out_bias=True)
    fields = flat_fields(hidden, layers, heads, heads, head_dim, 4 * hidden, vocab,
                         mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                         norm="layernorm", norm_bias=True, embedding_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         notes=["ALiBi positions; a LayerNorm follows the embedding"])
    return with_runs(fields, [Layer(attn, Dense(4 * hidden, False, True), 2)] * layers)


def gpt_neo(c: Config) -> dict:
    """GPT-Neo: global and "local" layers (attention_types); transformers caches every
    token in local layers too (the window is only a mask), so both cache in full."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_layers", "num_hidden_layers")
    heads = c.req_dim("num_heads", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    positions = c.req_int("max_position_embeddings")
    inner = c.opt_int("intermediate_size", None)
    d_ff = inner if inner is not None else 4 * hidden
    head_dim = hidden // heads
    attn = Attention(heads, heads, head_dim, out_bias=True)
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=True, out_bias=True, norm="layernorm",
                         norm_bias=True, learned_pos=positions, max_context=positions,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         notes=["GPT-Neo's local layers mask a window but cache every token"])
    return with_runs(fields, [Layer(attn, Dense(d_ff, False, True), 2)] * layers)


def mpt(c: Config) -> dict:
    """MPT: ALiBi (no position table unless learned_pos_emb without alibi), fused Wqkv,
    no biases when no_bias, weight-only LayerNorms then, tied embeddings."""
    hidden = c.req_dim("d_model", "hidden_size")
    layers = c.req_dim("n_layers", "num_hidden_layers")
    heads = c.req_dim("n_heads", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    attn_cfg = c.raw("attn_config")
    attn_cfg = attn_cfg if isinstance(attn_cfg, dict) else {}
    kv = attn_cfg.get("kv_n_heads") if attn_cfg.get("attn_type") == "grouped_query_attention" else None
    kv_heads = kv if isinstance(kv, int) and not isinstance(kv, bool) else heads
    ratio = c.opt_int("expansion_ratio", 4) or 4
    no_bias = c.opt_bool("no_bias", True)
    alibi = attn_cfg.get("alibi", True) is not False
    positions = c.opt_int("max_seq_len", 2048) or 0
    head_dim = hidden // heads
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=not no_bias, out_bias=not no_bias)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, ratio * hidden, vocab,
                         mlp="plain", mlp_bias=not no_bias, qkv_bias=not no_bias,
                         out_bias=not no_bias, norm="layernorm", norm_bias=not no_bias,
                         learned_pos=0 if alibi or not c.opt_bool("learned_pos_emb", True) else positions,
                         max_context=positions, tied_embeddings=True, notes=[])
    layer = Layer(attn, Dense(ratio * hidden, False, not no_bias), 2)
    return with_runs(fields, [layer] * layers)


def _biased_decoder(c: Config, hidden: int, layers: int, heads: int, d_ff: int, vocab: int,
                    **kw) -> dict:
    """Post-2018 fairseq/GPT layout: biased q/k/v/o and fc1/fc2, two LayerNorms with bias
    per layer, a final LayerNorm."""
    head_dim = hidden // heads
    attn = Attention(heads, heads, head_dim, qkv_bias=True, out_bias=True)
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                         norm="layernorm", norm_bias=True, **kw)
    return with_runs(fields, [Layer(attn, Dense(d_ff, gated=False, bias=True), 2)] * layers)


def codegen(c: Config) -> dict:
    """CodeGen: GPT-J's layout (bias-free fused qkv and out_proj, biased fc_in/fc_out, one
    LayerNorm for attention and MLP in parallel, a biased lm_head), under GPT-J's field names."""
    return gptj(c)


def ctrl(c: Config) -> dict:
    """CTRL: sinusoidal positions (a buffer, no weights), biased Wq/Wk/Wv/dense and ReLU
    MLP, a biased lm_head tied to the embedding."""
    hidden = c.req_dim("n_embd", "hidden_size")
    vocab = c.req_dim("vocab_size")
    # CTRLLMHeadModel: lm_head = Linear(n_embd, vocab_size, bias=True); the weight is tied,
    # the bias is its own.
    return _biased_decoder(
        c, hidden, c.req_dim("n_layer", "num_hidden_layers"),
        c.req_dim("n_head", "num_attention_heads"), c.req_dim("dff"), vocab,
        tied_embeddings=c.opt_bool("tie_word_embeddings", True), extra_params=vocab,
        max_context=c.opt_int("n_positions", 256) or 0,
        notes=["sinusoidal positions; lm_head has a bias"])


def xglm(c: Config) -> dict:
    """XGLM: fairseq's decoder, sinusoidal positions, scaled embeddings, tied."""
    if c.opt_bool("add_cross_attention", False):
        raise c.error("add_cross_attention=true: XGLM as an encoder-decoder's decoder is "
                      "not supported")
    return _biased_decoder(
        c, c.req_dim("d_model", "hidden_size"), c.req_dim("num_layers", "num_hidden_layers"),
        c.req_dim("attention_heads", "num_attention_heads"), c.req_dim("ffn_dim"),
        c.req_dim("vocab_size"), tied_embeddings=c.opt_bool("tie_word_embeddings", True),
        max_context=c.opt_int("max_position_embeddings", 2048) or 0,
        notes=["sinusoidal positions"])


def biogpt(c: Config) -> dict:
    """BioGPT: fairseq's decoder with learned positions (2 offset rows), tied."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    positions = c.req_int("max_position_embeddings")
    # BioGptLearnedPositionalEmbedding: Embedding(max_position_embeddings + 2, hidden)
    return _biased_decoder(
        c, hidden, layers, heads, d_ff, vocab, learned_pos=positions + 2,
        tied_embeddings=c.opt_bool("tie_word_embeddings", True), max_context=positions,
        notes=[])


def gpt_neox_japanese(c: Config) -> dict:
    """GPT-NeoX-Japanese: bias-free fused qkv, dense and MLP, hidden x
    intermediate_multiple_size wide; only the last layer's dense has a bias; tied."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    # GPTNeoXJapaneseMLP: int(hidden_size * intermediate_multiple_size)
    d_ff = hidden * c.opt_int("intermediate_multiple_size", 4)
    head_dim = hidden // heads
    mlp = Dense(d_ff, gated=False, bias=False)
    layer_list = [Layer(Attention(heads, heads, head_dim, out_bias=i == layers - 1), mlp, 2)
                  for i in range(layers)]
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab, mlp="plain",
                         norm="layernorm", norm_bias=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=["only the last layer's attention output has a bias"])
    return with_runs(fields, layer_list)


def persimmon(c: Config) -> dict:
    """Persimmon: fused biased qkv, LayerNorms with bias on q and k per head (qk_layernorm),
    a squared-ReLU MLP with biases, untied."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    head_dim = hidden // heads
    # q_layernorm and k_layernorm: LayerNorm(head_dim), a weight and a bias each
    qk = 2 * 2 * head_dim if c.opt_bool("qk_layernorm", True) else 0
    attn = Attention(heads, heads, head_dim, qkv_bias=True, out_bias=True, qk_norm=qk)
    fields = flat_fields(hidden, layers, heads, heads, head_dim, d_ff, vocab,
                         mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                         norm="layernorm", norm_bias=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 16384) or 0,
                         notes=[])
    return with_runs(fields, [Layer(attn, Dense(d_ff, gated=False, bias=True), 2)] * layers)


def git(c: Config) -> dict:
    """GIT (GenerativeImageText): a BERT-style post-LayerNorm decoder (biased q/k/v, dense,
    intermediate and output, a LayerNorm after attention and after the MLP), learned
    positions and a LayerNorm on the embedding, a biased output layer; its CLIP image
    encoder and projection are not counted."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    positions = c.opt_int("max_position_embeddings", 1024) or 0
    # post-LN: no final norm; GitEmbeddings: word + position tables, then a LayerNorm
    return _biased_decoder(
        c, hidden, layers, heads, d_ff, vocab, learned_pos=positions, final_norm=False,
        embedding_norm=True, extra_params=vocab,  # output: Linear(hidden, vocab) with bias
        tied_embeddings=c.opt_bool("tie_word_embeddings", False), max_context=positions,
        notes=["post-LayerNorm layers; the CLIP image encoder and its projection are not "
               "counted"])


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


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
# gpt-sw3: AutoConfig: GPT2Config (GPT2LMHeadModel)
    "falcon": falcon, "gpt2": gpt2_like, "gpt_bigcode": gpt2_like, "gpt_neox": gpt_neox,
    "opt": opt, "gpt_oss": gpt_oss, "phi": phi, "gptj": gptj, "gpt-sw3": gpt2_like,
    "bloom": bloom, "gpt_neo": gpt_neo, "mpt": mpt, "codegen": codegen, "ctrl": ctrl,
    "xglm": xglm, "biogpt": biogpt, "gpt_neox_japanese": gpt_neox_japanese,
    "persimmon": persimmon, "git": git,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {"n_positions": 1024},
    "gpt-sw3": {"n_positions": 1024},
    "gpt_bigcode": {"n_positions": 1024},
    "gpt_neo": {"max_position_embeddings": 2048},
    "gpt_oss": {"head_dim": 64, "num_key_value_heads": 8, "num_local_experts": 128,
                "sliding_window": 128},
    "opt": {"max_position_embeddings": 2048},
    "biogpt": {"max_position_embeddings": 1024},
}
