"""Mamba and the models built on its state: Mamba and Falcon-Mamba, Mamba-2, Jamba,
Bamba, Granite 4 (GraniteMoeHybrid), Falcon-H1, Nemotron-H: layers that hold a constant
state alone or beside attention layers.

Each reader follows that family's configuration_*.py and modeling_*.py in transformers
5.24: which modules a layer has, their shapes and biases, and the defaults the config
class fills in for a field config.json leaves out.
"""

from __future__ import annotations

from typing import Any, Callable

from kvcalc.hfconfig.config import MISSING, Config, core_dims, flat_fields, with_runs
from kvcalc.hfconfig.layer_types import layer_kinds, nemotron_h_blocks
from kvcalc.layers import Attention, Dense, Layer, Mamba, Mamba2, MoE, NoMixer


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


def _mamba2_head_dim(c: Config, key: str, heads: int, d_inner: int) -> int:
    """Bamba / Granite 4's mamba_d_head: a number, or "auto" (absent too) for
    mamba_expand * hidden_size // mamba_n_heads, as their config classes fill it in."""
    value = c.raw(key)
    if value is MISSING or value is None or value == "auto":
        return d_inner // heads
    return c.check_int(key, value)


def _bamba_mixer(c: Config, hidden: int) -> Mamba2:
    """The Mamba-2 mixer of Bamba and Granite 4 (mamba_* fields)."""
    heads = c.opt_int("mamba_n_heads", 128) or 128
    d_inner = (c.opt_int("mamba_expand", 2) or 2) * hidden
    return Mamba2(heads=heads, head_dim=_mamba2_head_dim(c, "mamba_d_head", heads, d_inner),
                  d_state=c.opt_int("mamba_d_state", 256) or 256,
                  groups=c.opt_int("mamba_n_groups", 1) or 1,
                  conv_kernel=c.opt_int("mamba_d_conv", 4) or 4,
                  conv_bias=c.opt_bool("mamba_conv_bias", True),
                  proj_bias=c.opt_bool("mamba_proj_bias", False))


def mamba2(c: Config) -> dict:
    """Mamba-2 (Mamba-Codestral): every layer one Mamba-2 mixer after one RMSNorm, no MLP."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    mixer = Mamba2(heads=c.opt_int("num_heads", 128) or 128, head_dim=c.opt_int("head_dim", 64) or 64,
                   d_state=c.opt_int("state_size", 128) or 128, groups=c.opt_int("n_groups", 8) or 8,
                   conv_kernel=c.opt_int("conv_kernel", 4) or 4,
                   conv_bias=c.opt_bool("use_conv_bias", True), proj_bias=c.opt_bool("use_bias", False))
    fields = flat_fields(hidden, layers, 1, 1, hidden, mixer.d_inner, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         notes=["state-space model: a constant state per sequence, no KV cache"])
    return with_runs(fields, [Layer(mixer, None, 1)] * layers)


def _attention_or_state(c: Config, layers: int) -> list[str]:
    """Bamba: attention on the layers attn_layer_indices lists (layer_types when given)."""
    def from_indices() -> list[str]:
        idx = c.raw("attn_layer_indices")
        chosen = set(idx) if isinstance(idx, list) else set()
        return ["full" if i in chosen else "state" for i in range(layers)]
    return layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "state",
                                   "mamba": "state", "attention": "full"}, from_indices)


def bamba(c: Config) -> dict:
    """Bamba: Mamba-2 layers and GQA attention layers (attn_layer_indices), each with a
    gated MLP."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = hidden // heads
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias)
    mixer = _bamba_mixer(c, hidden)
    mlp = Dense(d_ff, bias=c.opt_bool("mlp_bias", False))
    kinds = _attention_or_state(c, layers)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 262144) or 0,
                         notes=["hybrid: Mamba-2 layers hold a constant state; attention "
                                "layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else mixer, mlp, 2) for k in kinds])


def granitemoehybrid(c: Config) -> dict:
    """Granite 4 (GraniteMoeHybrid): Mamba-2 and attention layers (layer_types), each with
    routed experts (num_local_experts; none: the shared MLP alone) and a shared MLP."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = hidden // heads
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias)
    mixer = _bamba_mixer(c, hidden)
    shared_ff = c.opt_int("shared_intermediate_size", 1024) or 0
    experts = c.opt_int("num_local_experts", 8) or 0
    if experts:
        mlp = MoE(experts=experts, active=c.opt_int("num_experts_per_tok", 2) or 1,
                  expert_d_ff=d_ff, shared_experts=1, shared_d_ff=shared_ff)
    else:
        mlp = Dense(shared_ff)
    kinds = layer_kinds(c, layers, {"full_attention": "full", "linear_attention": "state",
                                    "attention": "full", "mamba": "state"},
                        lambda: ["state"] * layers)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                         notes=["hybrid: Mamba-2 layers hold a constant state; attention "
                                "layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else mixer, mlp, 2) for k in kinds])


def _one_bias(c: Config) -> bool:
    """Falcon-H1's Mamba-2 biases: in_proj's mamba_proj_bias, out_proj's projectors_bias
    (kvcalc's Mamba-2 has one switch for both; published configs set neither)."""
    bias = c.opt_bool("mamba_proj_bias", False)
    if c.opt_bool("projectors_bias", False) != bias:
        raise c.error("fields 'mamba_proj_bias' and 'projectors_bias' differ: kvcalc reads "
                      "Falcon-H1 with both or neither")
    return bias


def falcon_h1(c: Config) -> dict:
    """Falcon-H1: every layer runs GQA attention and a Mamba-2 mixer side by side on the
    same input (outputs summed), then a gated MLP; the Mamba-2 width is mamba_d_ssm."""
    hidden, layers, heads, vocab, d_ff = core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = c.opt_int("head_dim", 0) or hidden // heads
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias)
    # mamba_d_ssm: absent, FalconH1Config's 1024; null, mamba_expand x hidden_size
    d_ssm = c.raw("mamba_d_ssm")
    if d_ssm is MISSING:
        d_inner = 1024
    elif d_ssm is None:
        d_inner = (c.opt_int("mamba_expand", 2) or 2) * hidden
    else:
        d_inner = c.check_int("mamba_d_ssm", d_ssm)
    m_heads = c.opt_int("mamba_n_heads", 128) or 128
    mixer = Mamba2(heads=m_heads, head_dim=_mamba2_head_dim(c, "mamba_d_head", m_heads, d_inner),
                   d_state=c.opt_int("mamba_d_state", 256) or 256,
                   groups=c.opt_int("mamba_n_groups", 1) or 1,
                   conv_kernel=c.opt_int("mamba_d_conv", 4) or 4,
                   conv_bias=c.opt_bool("mamba_conv_bias", True),
                   proj_bias=_one_bias(c),
                   gated_norm=c.opt_bool("mamba_rms_norm", False))
    mlp = Dense(d_ff, bias=c.opt_bool("mlp_bias", False))
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                         notes=["parallel hybrid: every layer caches every token in its "
                                "attention and holds a constant Mamba-2 state beside it"])
    return with_runs(fields, [Layer(attn, mlp, 2, beside=mixer)] * layers)


# model_type -> its reader, the first sentence of whose docstring `kvcalc presets
# --families` shows (kvcalc.hfconfig.READER_MODULE names this module for each)
READERS: dict[str, Callable[[Config], dict]] = {
    "mamba": mamba, "falcon_mamba": mamba, "jamba": jamba, "nemotron_h": nemotron_h,
    "mamba2": mamba2, "bamba": bamba, "granitemoehybrid": granitemoehybrid,
    "falcon_h1": falcon_h1,
}

# What each configuration class fills in for a field config.json leaves out, where
# that differs from what an absent field means to the reader (Config.raw)
CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "jamba": {"num_key_value_heads": 8},
    "nemotron_h": {"mamba_head_dim": 64, "mamba_num_heads": 128, "moe_intermediate_size": 7688,
                   "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                   "num_key_value_heads": 8, "ssm_state_size": 128, "head_dim": 128,
                   "moe_shared_expert_intermediate_size": 7688},
}
