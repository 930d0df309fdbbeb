"""State-space models and hybrids: layers that hold a constant state (Mamba, Mamba-2,
short convolutions, Gated DeltaNet) alone or beside attention layers: Mamba and
Falcon-Mamba, Jamba, LFM2, LFM3, Qwen3-Next, Nemotron-H.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims, describe
from kvcalc.hfconfig.layer_types import (every_nth_full, layer_kinds, lfm2_full_attn_idxs,
                                         nemotron_h_blocks)
from kvcalc.hfconfig.moe import sparse_layers
from kvcalc.layers import (Attention, Dense, GatedDeltaNet, Layer, Mamba, Mamba2, MoE, NoMixer,
                           ShortConv)
from kvcalc.layers_state import Lfm3ShortConv


def _dt_rank(c: Config, key: str, hidden: int) -> int:
    """Mamba's rank of the time-step projection: the field, or "auto" / absent / null."""
    value = c.raw(key)
    if value is MISSING or value is None or value == "auto":
        return -(-hidden // 16)  # math.ceil(hidden_size / 16), as the config classes do
    return c.check_int(key, value)


def mamba(c: Config) -> dict:
    """Mamba / Falcon-Mamba: every layer one Mamba mixer after one RMSNorm, no MLP."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    d_inner = c.opt_int("intermediate_size", None) or int(c.raw("expand") if c.has("expand") else 2) * hidden
    mixer = Mamba(d_inner=d_inner, d_state=c.opt_int("state_size", 16) or 16,
                  d_conv=c.opt_int("conv_kernel", 4) or 4, dt_rank=_dt_rank(c, "time_step_rank", hidden),
                  conv_bias=c.opt_bool("use_conv_bias", True), proj_bias=c.opt_bool("use_bias", False))
    fields = flat_fields(hidden, layers, 1, 1, hidden, d_inner, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         notes=["state-space model: a constant state per sequence, no KV cache"])
    return with_runs(fields, [Layer(mixer, None, 1)] * layers)


def jamba(c: Config) -> dict:
    """Jamba: attention on layers with i % attn_layer_period == attn_layer_offset, Mamba
    elsewhere; MoE where i % expert_layer_period == expert_layer_offset."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    a_period, a_off = c.opt_int("attn_layer_period", 8) or 8, c.opt_int("attn_layer_offset", 4) or 0
    e_period, e_off = c.opt_int("expert_layer_period", 2) or 2, c.opt_int("expert_layer_offset", 1) or 0
    mixer = Mamba(d_inner=(c.opt_int("mamba_expand", 2) or 2) * hidden,
                  d_state=c.opt_int("mamba_d_state", 16) or 16,
                  d_conv=c.opt_int("mamba_d_conv", 4) or 4,
                  dt_rank=_dt_rank(c, "mamba_dt_rank", hidden),
                  conv_bias=c.opt_bool("mamba_conv_bias", True),
                  proj_bias=c.opt_bool("mamba_proj_bias", False), inner_norms=True)
    attn = Attention(heads, kv_heads, head_dim)
    experts = c.opt_int("num_experts", 16) or 1
    moe = MoE(experts=experts, active=c.opt_int("num_experts_per_tok", 2) or 1,
              expert_d_ff=d_ff) if experts > 1 else Dense(d_ff)
    layer_list = [Layer(attn if i % a_period == a_off else mixer,
                        moe if i % e_period == e_off else Dense(d_ff), 2) for i in range(layers)]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 262144) or 0,
                         notes=[f"hybrid: attention on 1 of {a_period} layers, Mamba on the rest"])
    return with_runs(fields, layer_list)


def lfm2_ff_dim(c: Config) -> int:
    """LFM2's SwiGLU width as Lfm2MLP builds it (transformers 5.24, modeling_lfm2.py).

    The base width is `block_ff_dim` when the config has it (Lfm2Config pops that legacy
    name over `intermediate_size`: LiquidAI's published LFM2-350M ... 2.6B configs state only
    `block_ff_dim`), else `intermediate_size`. With `block_auto_adjust_ff_dim` (default
    true) it becomes int(2 x width / 3); a `block_ffn_dim_multiplier` that is not null
    (default 1.0) then multiplies it and it is rounded up to `block_multiple_of` (default
    256). A null multiplier leaves int(2 x width / 3) unrounded, as Lfm2MLP does."""
    key = "block_ff_dim" if c.has("block_ff_dim") else "intermediate_size"
    if not c.has("block_ff_dim") and not c.has("intermediate_size"):
        raise c.missing("intermediate_size", " (or its legacy name 'block_ff_dim')")
    d_ff = c.req_dim(key)
    if not c.opt_bool("block_auto_adjust_ff_dim", True):
        return d_ff
    d_ff = int(2 * d_ff / 3)
    mult = c.raw("block_ffn_dim_multiplier")
    if mult is None:
        return d_ff
    if mult is MISSING:
        mult = 1.0
    if isinstance(mult, bool) or not isinstance(mult, (int, float)):
        raise c.error(f"field 'block_ffn_dim_multiplier' must be a number or null, got "
                      f"{describe(mult)}")
    d_ff = int(mult * d_ff)
    step = c.opt_int("block_multiple_of", 256)
    if not step or step < 0:
        raise c.error(f"field 'block_multiple_of' must be positive, got {step}")
    return step * -(-d_ff // step)


def lfm2(c: Config) -> dict:
    """LFM2: gated short-convolution layers and GQA attention layers (layer_types or
    full_attn_idxs); SwiGLU width auto-adjusted as Lfm2MLP does (lfm2_ff_dim, which reads
    the legacy `block_ff_dim`); q/k LayerNorms. `tie_embedding`, Lfm2Config's legacy name,
    wins over `tie_word_embeddings` when present, as the class pops it."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    d_ff = lfm2_ff_dim(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    kinds = layer_kinds(c, layers, {"full_attention": "full", "conv": "conv"},
                        lambda: lfm2_full_attn_idxs(c, layers))
    conv = ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 3) or 3,
                     bias=c.opt_bool("conv_bias", False))
    attn = Attention(heads, kv_heads, head_dim, qk_norm=2 * head_dim)
    tied = (c.opt_bool("tie_embedding", True) if c.has("tie_embedding")
            else c.opt_bool("tie_word_embeddings", True))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=tied,
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state"])
    return with_runs(fields, [Layer(attn if k == "full" else conv, Dense(d_ff), 2)
                              for k in kinds])


def lfm3(c: Config) -> dict:
    """LFM3: LFM2's short convolutions beside sliding and global attention layers (layer
    i % 4 == 2 global, the other multiples of 4 sliding), Qwen3's attention with a
    sigmoid gate per head, a plain SwiGLU, post-mixer and post-MLP norms."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    kinds = layer_kinds(c, layers, {"full_attention": "full", "sliding_attention": "sliding",
                                    "conv": "conv"},
                        lambda: ["full" if i % 4 == 2 else "sliding" if i % 4 == 0 and i else
                                 "conv" for i in range(layers)])
    # Lfm3Config: sliding_window null makes a sliding layer attend in full
    window = c.opt_int("sliding_window", 0) or 0
    bias = c.opt_bool("attention_bias", False)
    gate = c.opt_bool("use_attention_gate", True)
    norms = 4 if c.opt_bool("use_sandwich_norm", True) else 2
    conv = Lfm3ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 7) or 7,
                         bias=c.opt_bool("conv_bias", False))

    def mixer(kind: str):
        if kind == "conv":
            return conv
        kind = kind if window else "full"
        return Attention(heads, kv_heads, head_dim, kind=kind,
                         window=window if kind == "sliding" else 0, qkv_bias=bias,
                         out_bias=bias, qk_norm=2 * head_dim, head_gate=gate)

    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True, norms_per_layer=norms,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state; "
                                "vLLM serves no LFM3 (no engine count)"])
    return with_runs(fields, [Layer(mixer(k), Dense(d_ff), norms) for k in kinds])


def qwen3_next(c: Config) -> dict:
    """Qwen3-Next: Gated DeltaNet linear attention on 3 of 4 layers (layer_types, else
    full_attention_interval), gated full attention with q/k norms on the rest; MoE with
    a gated shared expert (sparse layers as Qwen MoE)."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"},
                        lambda: every_nth_full(
                            layers, c.opt_int("full_attention_interval", 4) or 4, "linear"))
    linear = GatedDeltaNet(k_heads=c.req_int("linear_num_key_heads"),
                           v_heads=c.req_int("linear_num_value_heads"),
                           k_dim=c.req_int("linear_key_head_dim"),
                           v_dim=c.req_int("linear_value_head_dim"),
                           conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=2 * head_dim, gated=True)
    sparse = sparse_layers(c, layers)
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1 if shared_ff else 0,
              shared_d_ff=shared_ff, shared_gate=bool(shared_ff))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; full attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, moe if sp else Dense(d_ff), 2)
                              for k, sp in zip(kinds, sparse)])


def nemotron_h(c: Config) -> dict:
    """Nemotron-H: one block per layer, each a Mamba-2 mixer, attention, an MLP or a MoE
    after one RMSNorm (layers_block_type, or the older hybrid_override_pattern string
    M/*/-/E). MLP and MoE blocks cache nothing. `moe_latent_size` (Nemotron 3 Super and
    Ultra's LatentMoE): routed experts in that latent, with fc1/fc2_latent_proj in and
    out (transformers' NemotronHMoE); the MTP layers (num_nextn_predict_layers) are not
    built, as transformers does not build them."""
    hidden = c.req_dim("hidden_size")
    vocab = c.req_dim("vocab_size")
    types = nemotron_h_blocks(c)
    heads = c.req_dim("num_attention_heads")
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    d_ff = c.req_dim("intermediate_size")
    bias = c.opt_bool("attention_bias", False)
    mamba = Mamba2(heads=c.req_int("mamba_num_heads"), head_dim=c.req_int("mamba_head_dim"),
                   d_state=c.req_int("ssm_state_size"), groups=c.opt_int("n_groups", 8) or 8,
                   conv_kernel=c.opt_int("conv_kernel", 4) or 4,
                   conv_bias=c.opt_bool("use_conv_bias", True),
                   proj_bias=c.opt_bool("mamba_proj_bias", False))
    blocks = {
        "linear_attention": Layer(mamba, None, 1),
        "full_attention": Layer(Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias),
                                None, 1),
        "mlp": Layer(NoMixer(), Dense(d_ff, gated=False, bias=c.opt_bool("mlp_bias", False)), 1),
    }
    if "moe" in types:
        shared = c.opt_int("n_shared_experts", 0) or 0
        blocks["moe"] = Layer(NoMixer(), MoE(
            experts=c.req_int("n_routed_experts"), active=c.req_int("num_experts_per_tok"),
            expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=shared,
            shared_d_ff=c.opt_int("moe_shared_expert_intermediate_size", 0) or 0,
            gated=False, latent=c.opt_int("moe_latent_size", 0) or 0,
            latent_bias=c.opt_bool("mlp_bias", False)), 1)
    fields = flat_fields(hidden, len(types), heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, norms_per_layer=1,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                         notes=["hybrid: Mamba-2 layers hold a constant state; MLP and MoE "
                                "blocks cache nothing"])
    return with_runs(fields, [blocks[t] for t in types])
