"""Older GPT-shaped decoders (2019-2023) with a plain MLP and LayerNorms: CTRL, XGLM,
BioGPT, GPT-NeoX-Japanese, Persimmon and GIT's text decoder; CodeGen, read as GPT-J.

Each lists its layers as transformers 5.24 builds them (`modeling_<family>.py`); every
layer caches full K/V for every head, as a plain DynamicCache.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import Config, core_dims
from kvcalc.hfconfig.gpt import gptj
from kvcalc.layers import Attention, Dense, Layer


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
