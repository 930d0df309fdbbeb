"""Families whose recurrent state is a kind of its own (kvcalc.layers_state): MiniMax-Text-01
(lightning attention beside softmax attention), Kimi Linear (Kimi Delta Attention beside
MLA), Ling 3's bailing_hybrid (its delta attention beside gated MLA), RecurrentGemma (RG-LRU
beside local attention), RWKV-4 and xLSTM (mLSTM).

Each reader follows that family's configuration_*.py and modeling_*.py in transformers
5.24, with the defaults its config class fills in for a field config.json leaves out.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims
from kvcalc.hfconfig.layer_types import layer_kinds
from kvcalc.layers import (MLSTM, RGLRU, RWKV, Attention, Dense, KimiDelta, Latent, Layer,
                           Lightning, MoE)


def minimax(c: Config) -> dict:
    """MiniMax-Text-01: lightning attention and softmax GQA attention (layer_types, else
    alternating from a softmax layer), routed experts on every layer."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = c.opt_int("head_dim", 0) or hidden // heads
    if c.raw("sliding_window") not in (MISSING, None):
        # transformers windows the softmax layers' mask but its MiniMaxCache keeps every token
        raise c.error("field 'sliding_window' is set: kvcalc reads MiniMax with full softmax "
                      "attention only (null)")
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: ["full" if i % 2 == 0 else "linear" for i in range(layers)])
    attn = Attention(heads, kv_heads, head_dim)
    lightning = Lightning(heads=heads, head_dim=head_dim)
    moe = MoE(experts=c.opt_int("num_local_experts", 8) or 1,
              active=c.opt_int("num_experts_per_tok", 2) or 1, expert_d_ff=d_ff)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096 * 32) or 0,
                         notes=["hybrid: lightning attention layers hold a constant state; "
                                "softmax attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else lightning, moe, 2) for k in kinds])


def _kimi_linear_config(c: Config) -> dict:
    """The checkpoint's `linear_attn_config` object ({} when absent), as the config class
    reads it: head_dim, num_heads, short_conv_kernel_size, 1-based full_attn_layers and
    kda_layers."""
    value = c.raw("linear_attn_config")
    if value is MISSING or value is None:
        return {}
    if not isinstance(value, dict):
        raise c.error("field 'linear_attn_config' must be an object")
    return value


def _sub_int(c: Config, sub: dict, key: str, field: str, default: int) -> int:
    """linear_attn_config[key] when the checkpoint has it, else the top-level field."""
    if key in sub:
        return c.check_int(f"linear_attn_config.{key}", sub[key])
    return c.opt_int(field, default) or default


def _kimi_layer_kinds(c: Config, layers: int, sub: dict) -> list[str]:
    """layer_types, else linear_attn_config's 1-based full_attn_layers / kda_layers, else
    a full layer every fourth from layer 4 (KimiLinearConfig's precedence)."""
    def older() -> list[str]:
        full, kda = sub.get("full_attn_layers"), sub.get("kda_layers")
        if isinstance(full, list) and isinstance(kda, list):
            kinds = [None] * layers
            for kind, listed in (("full", full), ("linear", kda)):
                for i in listed:
                    if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= layers:
                        raise c.error("linear_attn_config's layer lists must hold layer "
                                      f"numbers 1..{layers}")
                    kinds[i - 1] = kind
            if None in kinds:
                raise c.error("linear_attn_config's full_attn_layers and kda_layers leave "
                              "a layer out")
            return kinds
        return ["full" if i and i % 4 == 0 else "linear" for i in range(layers)]
    return layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"}, older)


def _kimi_sparse(c: Config, layers: int) -> list[bool]:
    """mlp_layer_types ("dense" / "sparse"), else dense before first_k_dense_replace (1)."""
    types = c.raw("mlp_layer_types")
    if types not in (MISSING, None):
        if (not isinstance(types, list) or len(types) != layers
                or any(t not in ("dense", "sparse") for t in types)):
            raise c.error(f"field 'mlp_layer_types' must list {layers} of 'dense' or 'sparse'")
        return [t == "sparse" for t in types]
    first = c.opt_int("first_k_dense_replace", 1)
    return [i >= first for i in range(layers)]


def kimi_linear(c: Config) -> dict:
    """Kimi Linear: Kimi Delta Attention on 3 of 4 layers, MLA (NoPE) on the rest
    (layer_types or linear_attn_config); DeepSeek-style routed and shared experts after
    the first dense layer."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    sub = _kimi_linear_config(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.opt_int("kv_lora_rank", 512) or 512,
                 rope_dim=c.opt_int("qk_rope_head_dim", 64) or 0,
                 nope_dim=c.opt_int("qk_nope_head_dim", 128) or 0,
                 v_dim=c.opt_int("v_head_dim", 128) or 128,
                 q_lora_rank=c.opt_int("q_lora_rank", 0) or 0, bias=bias)
    kda = KimiDelta(heads=_sub_int(c, sub, "num_heads", "linear_num_heads", 32),
                    head_dim=_sub_int(c, sub, "head_dim", "linear_head_dim", 128),
                    conv_kernel=_sub_int(c, sub, "short_conv_kernel_size",
                                         "linear_conv_kernel_dim", 4))
    kinds = _kimi_layer_kinds(c, layers, sub)
    expert_ff = c.opt_int("moe_intermediate_size", 1024) or 1
    # KimiLinearConfig's attribute_map: config.json holds num_experts, num_shared_experts,
    # num_experts_per_token and model_max_length (the usual names are aliases)
    shared = c.opt_int("num_shared_experts", 1, "n_shared_experts") or 0
    moe = MoE(experts=c.opt_int("num_experts", 256, "num_local_experts") or 1,
              active=c.opt_int("num_experts_per_token", 8, "num_experts_per_tok") or 1,
              expert_d_ff=expert_ff,
              shared_experts=shared, shared_d_ff=expert_ff)
    sparse = _kimi_sparse(c, layers)
    kv_heads = 1  # the latent is shared by every head
    fields = flat_fields(hidden, layers, heads, kv_heads, mla.kv_lora_rank, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("model_max_length", 1048576,
                                               "max_position_embeddings") or 0,
                         notes=["hybrid: Kimi Delta Attention layers hold a constant state; "
                                "MLA layers cache one latent per token"])
    return with_runs(fields, [Layer(mla if k == "full" else kda, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])


def recurrent_gemma(c: Config) -> dict:
    """RecurrentGemma (Griffin): RG-LRU recurrent blocks and local (sliding-window) MQA
    attention blocks in the repeating block_types pattern; biased GeGLU MLPs of
    intermediate_size / 2; Gemma's scaled, tied embedding."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("intermediate_size") // 2  # RecurrentGemmaMlp halves it
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.opt_int("head_dim", 0) or hidden // heads
    window = c.opt_int("attention_window_size", 2048) or 2048
    pattern = c.raw("block_types")
    if pattern is MISSING or pattern is None:
        pattern = ["recurrent", "recurrent", "attention"]
    if (not isinstance(pattern, list) or not pattern
            or any(t not in ("recurrent", "attention") for t in pattern)):
        raise c.error("field 'block_types' must list 'recurrent' and 'attention' blocks")
    kinds = [pattern[i % len(pattern)] for i in range(layers)]
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, kind="sliding", window=window,
                     qkv_bias=bias, out_bias=True)
    rglru = RGLRU(width=c.opt_int("lru_width", hidden) or hidden, heads=heads,
                  conv_width=c.opt_int("conv1d_width", 4) or 4)
    mlp = Dense(d_ff, bias=True)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         notes=[f"hybrid: RG-LRU blocks hold a constant state; local attention "
                                f"keeps the last {window:,} tokens"])
    return with_runs(fields, [Layer(attn if k == "attention" else rglru, mlp, 2) for k in kinds])


def rwkv(c: Config) -> dict:
    """RWKV-4: every layer a time-mixing WKV recurrence and a channel-mixing MLP, each
    after a LayerNorm; a LayerNorm on the embedding (layer 0's pre_ln) and at the end."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    width = c.opt_int("attention_hidden_size", hidden) or hidden
    d_ff = c.opt_int("intermediate_size", 4 * hidden) or 4 * hidden
    mixer = RWKV(width=width, d_model=hidden)
    fields = flat_fields(hidden, layers, 1, 1, hidden, d_ff, vocab,
                         norm="layernorm", norm_bias=True, embedding_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         notes=["recurrent model (RWKV): a constant state per sequence, no KV "
                                "cache"])
    return with_runs(fields, [Layer(mixer, Dense(d_ff, gated=False), 2)] * layers)


def _factor(c: Config, key: str, default: float) -> float:
    """A positive width factor (xLSTM's qk_dim_factor, ...): a number, not only an int."""
    value = c.raw(key)
    if value is MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 64:
        raise c.error(f"field {key!r} must be a positive number, got {value!r}")
    return value


def xlstm(c: Config) -> dict:
    """xLSTM (xLSTM 7B): every block an mLSTM layer and a gated MLP, each after an RMSNorm."""
    hidden = c.req_dim("hidden_size", "embedding_dim")
    layers = c.req_dim("num_hidden_layers", "num_blocks")
    vocab = c.req_dim("vocab_size")
    heads = c.opt_int("num_heads", 8) or 8
    bias = c.opt_bool("use_bias", False)
    # xLSTMLayer sizes q/k and v as int(hidden x factor) (the config's rounded qk_dim is
    # only the empty cache's shape, replaced by the layer's own states)
    qk = int(hidden * _factor(c, "qk_dim_factor", 0.5))
    v = int(hidden * _factor(c, "v_dim_factor", 1.0))
    multiple = c.opt_int("ffn_round_up_to_multiple_of", 64) or 64
    # xLSTMConfig.round_up_to_next_multiple_of, float arithmetic and all
    up = int(((hidden * _factor(c, "ffn_proj_factor", 2.667) + multiple - 1) // multiple)
             * multiple)
    if qk % heads or v % heads:
        raise c.error(f"num_heads ({heads}) must divide the q/k width {qk} and the value "
                      f"width {v}")
    mixer = MLSTM(heads=heads, qk_head_dim=qk // heads, v_head_dim=v // heads, bias=bias)
    notes = ["recurrent model (xLSTM): a constant state per sequence, no KV cache"]
    if bias:
        notes.append("use_bias: its RMSNorms have biases (counted as LayerNorms' weight "
                     "and bias)")
    fields = flat_fields(hidden, layers, heads, heads, qk // heads, up, vocab,
                         norm="layernorm" if bias else "rmsnorm", norm_bias=bias,
                         final_norm=c.opt_bool("add_out_norm", True),
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         notes=notes)
    return with_runs(fields, [Layer(mixer, Dense(up, gated=True, bias=bias), 2)] * layers)


def bailing_hybrid(c: Config) -> dict:
    """Ling 3 (bailing_hybrid): a Kimi-style delta attention with full-rank gates on the
    layers between every `layer_group_size`-th, gated MLA on those; routed experts with
    shared ones after the first dense layers (mlp_layer_types)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    bias = c.opt_bool("attention_bias", False)
    mla = Latent(heads=heads, kv_lora_rank=c.opt_int("kv_lora_rank", 512) or 512,
                 rope_dim=c.opt_int("qk_rope_head_dim", 64) or 0,
                 nope_dim=c.opt_int("qk_nope_head_dim", 128) or 0,
                 v_dim=c.opt_int("v_head_dim", 128) or 128,
                 q_lora_rank=c.opt_int("q_lora_rank", 0) or 0, bias=bias, head_gate=True)
    # BailingHybridConfig.__post_init__: the linear heads are the attention heads, their
    # size config.json's head_dim (which it then overwrites with qk_rope_head_dim), the
    # kernel short_conv_kernel_size; a config it saved states them as linear_* (which win)
    delta = KimiDelta(heads=c.opt_int("linear_num_heads", None) or heads,
                      head_dim=c.opt_int("linear_head_dim", None) or c.opt_int("head_dim", 128)
                      or 128,
                      conv_kernel=c.opt_int("linear_conv_kernel_dim", None)
                      or c.opt_int("short_conv_kernel_size", 4) or 4, low_rank=False)
    group = c.opt_int("layer_group_size", 6) or 6
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: ["full" if (i + 1) % group == 0 else "linear"
                                 for i in range(layers)])
    dense = c.opt_int("first_k_dense_replace", 2) or 0
    mlp_types = c.raw("mlp_layer_types")
    if isinstance(mlp_types, list):
        if len(mlp_types) != layers or set(mlp_types) - {"dense", "sparse"}:
            raise c.error("mlp_layer_types must list 'dense' or 'sparse' for every layer")
        sparse = [t == "sparse" for t in mlp_types]
    else:
        sparse = [i >= dense for i in range(layers)]
    # BailingHybridConfig's attribute_map: config.json holds num_experts,
    # num_experts_per_token, num_shared_experts and model_max_length
    expert_ff = c.opt_int("moe_intermediate_size", 768) or 1
    shared = c.opt_int("num_shared_experts", 1, "n_shared_experts") or 0
    moe = MoE(experts=c.opt_int("num_experts", 512, "num_local_experts") or 1,
              active=c.opt_int("num_experts_per_token", 8, "num_experts_per_tok") or 1,
              expert_d_ff=expert_ff, shared_experts=1 if shared else 0,
              shared_d_ff=expert_ff * shared)
    fields = flat_fields(hidden, layers, heads, 1, mla.kv_lora_rank, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("model_max_length", 262144,
                                               "max_position_embeddings") or 0,
                         notes=["hybrid: delta-attention layers hold a constant state; gated "
                                "MLA layers cache one latent per token; the MTP layers "
                                "(num_mtp_layers) are not built by transformers, nor counted"])
    return with_runs(fields, [Layer(mla if k == "full" else delta, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])
