"""More families with a constant state per sequence, alone or beside attention, read
with the layer kinds kvcalc.hfconfig.liquid already uses (Mamba-2, Gated DeltaNet,
short convolution): Mamba-2, Bamba, Granite 4 (GraniteMoeHybrid), Falcon-H1, LFM2-MoE,
Qwen3.5 and Qwen3.5-MoE, Qwen4-Exp, Lara Mini.

Each reader follows that family's configuration_*.py and modeling_*.py in transformers
5.24: which modules a layer has, their shapes and biases, and the defaults the config
class fills in for a field config.json leaves out.
"""

from __future__ import annotations

from kvcalc.hfconfig.build import flat_fields, with_runs
from kvcalc.hfconfig.config import MISSING, Config, core_dims
from kvcalc.hfconfig.layer_types import every_nth_full, layer_kinds, required_window
from kvcalc.layers import Attention, Dense, GatedDeltaNet, Layer, Mamba2, MoE, ShortConv
from kvcalc.layers_indexed import QSAAttention
from kvcalc.layers_state import LaraGatedDeltaNet

# Each family's config-class defaults for the fields its reader takes as optional.
_QWEN3_5 = {"num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 32768}
_QWEN3_5_MOE = {"num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 32768}


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


def lfm2_moe(c: Config) -> dict:
    """LFM2-MoE: LFM2's short-convolution and GQA layers (layer_types, required), dense
    gated MLPs on the first num_dense_layers, routed experts after."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.opt_int("num_attention_heads", 32) or 32
    vocab = c.req_dim("vocab_size")
    d_ff = c.req_dim("intermediate_size")
    kv_heads = c.opt_int("num_key_value_heads", 8) or heads
    head_dim = hidden // heads

    def required() -> list[str]:
        raise c.missing("layer_types", " (LFM2-MoE names each layer conv or full_attention)")
    kinds = layer_kinds(c, layers, {"full_attention": "full", "conv": "conv"}, required)
    conv = ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 3) or 3,
                     bias=c.opt_bool("conv_bias", False))
    attn = Attention(heads, kv_heads, head_dim, qk_norm=2 * head_dim)
    dense = c.opt_int("num_dense_layers", 2) or 0
    moe = MoE(experts=c.opt_int("num_experts", 32) or 1,
              active=c.opt_int("num_experts_per_tok", 4) or 1,
              expert_d_ff=c.opt_int("moe_intermediate_size", 1792) or 1)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                         notes=["hybrid: short-convolution layers hold a constant state"])
    return with_runs(fields, [Layer(attn if k == "full" else conv,
                                    Dense(d_ff) if i < dense else moe, 2)
                              for i, k in enumerate(kinds)])


def _qwen_delta_net(c: Config) -> GatedDeltaNet:
    """Qwen3.5's (and Qwen4-Exp's) Gated DeltaNet, with their class defaults."""
    return GatedDeltaNet(k_heads=c.opt_int("linear_num_key_heads", 16) or 16,
                         v_heads=c.opt_int("linear_num_value_heads", 32) or 32,
                         k_dim=c.opt_int("linear_key_head_dim", 128) or 128,
                         v_dim=c.opt_int("linear_value_head_dim", 128) or 128,
                         conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)


def _qwen_moe(c: Config, *, experts: int, active: int) -> MoE:
    """Qwen3.5-MoE's (and Qwen4-Exp's) routed experts beside one gated shared expert,
    with the class's expert counts as defaults."""
    shared_ff = c.opt_int("shared_expert_intermediate_size", 512) or 0
    d_ff = c.opt_int("moe_intermediate_size", 512) or 1
    return MoE(experts=c.opt_int("num_experts", experts) or 1,
               active=c.opt_int("num_experts_per_tok", active) or 1, expert_d_ff=d_ff,
               shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff,
               shared_gate=bool(shared_ff))


def _qwen_kinds(c: Config, layers: int, names: dict[str, str]) -> list[str]:
    """layer_types by `names`, else every full_attention_interval-th layer full (4)."""
    return layer_kinds(c, layers, names, lambda: every_nth_full(
        layers, c.opt_int("full_attention_interval", 4) or 4, "linear"))


def qwen3_5(c: Config) -> dict:
    """Qwen3.5 / Qwen3.6: Gated DeltaNet linear attention on 3 of 4 layers (layer_types,
    else full_attention_interval), gated full attention with q/k norms on the rest;
    a dense gated MLP (qwen3_5_text) or routed experts with a gated shared expert on every
    layer (qwen3_5_moe_text)."""
    moe_family = c.model_type == "qwen3_5_moe_text"
    defaults = _QWEN3_5_MOE if moe_family else _QWEN3_5
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    heads = c.req_dim("num_attention_heads")
    vocab = c.req_dim("vocab_size")
    kv_heads = c.opt_int("num_key_value_heads", defaults["num_key_value_heads"]) or heads
    head_dim = c.opt_int("head_dim", defaults["head_dim"]) or hidden // heads
    kinds = _qwen_kinds(c, layers, {"full_attention": "full", "linear_attention": "linear"})
    linear = _qwen_delta_net(c)
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=2 * head_dim, gated=True)
    if moe_family:
        mlp = _qwen_moe(c, experts=256, active=8)
        d_ff = mlp.expert_d_ff
    else:
        d_ff = c.req_dim("intermediate_size")
        mlp = Dense(d_ff)
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings",
                                               defaults["max_position_embeddings"]) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; full attention layers cache every token"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, mlp, 2) for k in kinds])


def qwen4_exp(c: Config) -> dict:
    """Qwen4-Exp: Qwen3.5-MoE's Gated DeltaNet and gated attention, the attention's tokens
    picked by a QSA indexer, and hyper-connections (hc_count residual streams, a low-rank
    mixer before each mixer and MLP) in place of the layer norms."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    if c.raw("ple_layer_ids") not in (MISSING, None, []):
        raise c.error("kvcalc does not read Qwen4-Exp's per-layer n-gram embeddings "
                      "(ple_layer_ids)")
    if c.req_dim("indexer_kv_heads") != 1:
        raise c.error("field 'indexer_kv_heads' must be 1 (Qwen4-Exp's QSA indexer)")
    kv_heads = c.opt_int("num_key_value_heads", 2) or heads
    head_dim = c.opt_int("head_dim", 256) or hidden // heads
    # Qwen4ExpTextConfig: "full_attention" in a released layer_types is an indexed layer
    kinds = _qwen_kinds(c, layers, {"full_attention": "full", "indexed_attention": "full",
                                    "linear_attention": "linear"})
    linear = _qwen_delta_net(c)
    bias = c.opt_bool("attention_bias", False)
    attn = QSAAttention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                        qk_norm=2 * head_dim, gated=True,
                        index_heads=c.req_dim("indexer_n_heads"),
                        index_head_dim=c.req_dim("indexer_head_dim"),
                        index_budget=c.req_dim("indexer_budget"),
                        index_compress_ratio=c.req_dim("indexer_compress_ratio"))
    mlp = _qwen_moe(c, experts=512, active=10)
    d_ff = mlp.expert_d_ff
    streams, rank = c.req_dim("hc_count"), c.req_dim("hc_lowrank")
    wide = streams * hidden
    # Qwen4ExpTextGatedResidual: a grouped RMSNorm over the streams, the low-rank mixer
    # (down, up) and the streams' injection weights; two a layer, and the model's last
    # (no injection) where the final norm would be
    mixer_params = wide + 2 * wide * rank
    extra = layers * 2 * (mixer_params + wide * streams) + mixer_params
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True, norms_per_layer=0,
                         final_norm=False, extra_params=extra,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; QSA attention layers cache every token and its "
                                "indexer key",
                                f"hyper-connections ({streams} streams, rank {rank}): "
                                f"{extra:,} parameters in extra_params, their matmuls not "
                                "in the FLOPs"])
    return with_runs(fields, [Layer(attn if k == "full" else linear, mlp, 0) for k in kinds])


def lara_mini(c: Config) -> dict:
    """Lara Mini: Qwen3.5's Gated DeltaNet on two of every five layers, Qwen3's attention
    (q/k norms, no output gate) sliding on two and global without RoPE on one; routed
    experts beside an ungated shared expert on every layer."""
    hidden, layers, heads, vocab = (c.req_dim(k) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    pattern = ("linear", "sliding", "linear", "full", "sliding")  # LaraMiniConfig's period 5
    kinds = layer_kinds(c, layers, {"full_attention": "full", "sliding_attention": "sliding",
                                    "linear_attention": "linear"},
                        lambda: [pattern[i % 5] for i in range(layers)])
    window = required_window(c) if "sliding" in kinds else 0
    linear = LaraGatedDeltaNet(k_heads=c.req_dim("linear_num_key_heads"),
                               v_heads=c.req_dim("linear_num_value_heads"),
                               k_dim=c.req_dim("linear_key_head_dim"),
                               v_dim=c.req_dim("linear_value_head_dim"),
                               conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    bias = c.opt_bool("attention_bias", False)
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    d_ff = c.req_dim("moe_intermediate_size")
    moe = MoE(experts=c.req_dim("num_experts"), active=c.req_dim("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=1 if shared_ff else 0, shared_d_ff=shared_ff)

    def mixer(kind: str):
        if kind == "linear":
            return linear
        return Attention(heads, kv_heads, head_dim, kind=kind,
                         window=window if kind == "sliding" else 0, qkv_bias=bias,
                         out_bias=bias, qk_norm=2 * head_dim)

    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                         qkv_bias=bias, out_bias=bias, qk_norm=True,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                         max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                         notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                "state; sliding layers keep their window, global ones every "
                                "token; vLLM serves no Lara Mini (no engine count)"])
    return with_runs(fields, [Layer(mixer(k), moe, 2) for k in kinds])


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
