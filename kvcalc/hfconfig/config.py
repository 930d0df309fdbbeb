"""Typed access to one config.json dict, and the building blocks the family readers share.

`Config` reads each field as its config class reads it, and every error names the field
(and the model_type when one is missing); a field config.json leaves out is the family's
class default where the family's module lists one (its CLASS_DEFAULTS). `MISSING` is what
`Config.raw` returns for an absent field, so that absent and null (`None`) stay apart:
several config classes default the two differently.

What a reader returns is ModelSpec's keyword fields, and for a model described layer by
layer the runs too. A family read into flat fields alone (windows, MLA and experts as
ModelSpec.uniform takes them) has its layers built by ModelSpec.uniform, and a flag may
reshape it later; one whose layers differ lists them, and `with_runs` compresses them.
`decoder`, `experts_only`, `dense_then_moe` and `sparse_layers` are the layer stacks
several families build alike.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from kvcalc.ground.dtypes import MAX_LAYERS, MAX_WIDTH
from kvcalc.errors import KvcalcError
from kvcalc.layers import Attention, Dense, Latent, Layer, MoE
from kvcalc.spec import compress

MISSING = object()


def json_kind(value: Any) -> str:
    """What a JSON document holds, in words: null, a list, a number, a string, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), "something else")


def describe(value: Any) -> str:
    """A JSON value for a message: scalars as written (long ones cut), containers by kind."""
    if isinstance(value, list):
        return f"a list of {len(value):,}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} keys"
    if isinstance(value, str):  # never quoted back: a config may hold anything
        return "a string"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length():,}-bit integer"
    return json.dumps(value)


_LAYER_COUNT_KEYS = frozenset({
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers",
    "decoder_layers", "encoder_layers", "num_encoder_layers", "num_nextn_predict_layers",
    "first_k_dense_replace", "max_window_layers"})


_MAX_CONFIG_INT = MAX_WIDTH * 1_000_000

# The sizes that say which model a config is: refused when absent, whatever the class's
# default (tests/test_hf_defaults.py leaves them out of its walk).
CORE_FIELDS = frozenset({
    "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
    "intermediate_size", "n_embd", "n_layer", "n_head", "n_inner", "ffn_dim", "num_heads",
    "num_layers", "d_model", "n_layers", "n_heads", "ffn_hidden_size",
    "attention_heads", "dff"})


# A family module's CLASS_DEFAULTS: fields its transformers configuration classes fill in
# with a number of their own when config.json leaves them out (transformers 5.24,
# `configuration_<family>.py`), where that number is not what an absent field means to
# kvcalc's reader for the family: read as if config.json stated it (Config.raw). Null keeps
# its meaning (no q LoRA, no experts, one K/V head per query head), and a class default of
# None adds nothing. Not there, and still refused when absent: the sizes every saved
# config.json carries (CORE_FIELDS), whose class default is one checkpoint's shape (a
# Llama-7B) rather than the model's. tests/test_hf_defaults.py holds every field kvcalc
# reads, for every model_type it reads, to the class's own value.
class Config:
    """Typed access to one config dict, with errors that name the field."""

    def __init__(self, cfg: dict, model_type: str, where: str,
                 defaults: Mapping[str, Any] | None = None) -> None:
        self.cfg = cfg
        self.model_type = model_type
        self.where = where
        # what the family's configuration class fills in for an absent field (the
        # CLASS_DEFAULTS of the module that reads model_type)
        self.defaults = defaults or {}
        # every key a reader asked for (present or not): what a reader did not ask for,
        # it did not read (kvcalc.hfconfig.fallback.unread_fields)
        self.asked: set[str] = set()

    def over(self, cfg: dict, where: str) -> Config:
        """Another dict (a nested config, or this one with keys renamed or added) read as
        this family reads: the same model_type and class defaults."""
        return Config(cfg, self.model_type, where, self.defaults)

    def renamed(self, names: dict[str, str]) -> Config:
        """The config under its class's canonical field names (its attribute_map: the
        original checkpoint's name -> the name the model reads), a canonical one winning."""
        cfg = dict(self.cfg)
        for old, new in names.items():
            if old in cfg and new not in cfg:
                cfg[new] = cfg.pop(old)
        return self.over(cfg, self.where)

    def error(self, message: str) -> KvcalcError:
        return KvcalcError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        self.asked.add(key)
        return key in self.cfg

    def raw(self, key: str, *aliases: str) -> Any:
        """The value under `key` (or the first alias present); absent, the family's
        configuration class's own value (its module's CLASS_DEFAULTS), else MISSING."""
        self.asked.update((key, *aliases))
        for k in (key, *aliases):
            if k in self.cfg:
                return self.cfg[k]
        return self.defaults.get(key, MISSING)

    def missing(self, key: str, why: str = "") -> KvcalcError:
        """The error for a required field that is absent (`why` adds the reason)."""
        return self.error(
            f"missing required field {key!r} for model_type {self.model_type!r}{why}"
        )

    def check_int(self, key: str, value: Any) -> int:
        """`value`, read from `key`, if it is an integer within what kvcalc reads."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"field {key!r} must be an integer, got {describe(value)}")
        # Bounded here, before any reader builds a per-layer list from it: 10^7 layers
        # once took minutes and gigabytes to refuse, 2^63 overflowed range().
        upper = MAX_LAYERS if key in _LAYER_COUNT_KEYS else _MAX_CONFIG_INT
        if abs(value) > upper:
            what = f"{upper:,} layers" if upper == MAX_LAYERS else f"{upper:,}"
            raise self.error(f"field {key!r} is over the {what} kvcalc reads")
        return value

    def req_int(self, key: str, *aliases: str, why: str = "") -> int:
        value = self.raw(key, *aliases)
        if value is MISSING or value is None:
            raise self.missing(key, why)
        return self.check_int(key, value)

    def req_dim(self, key: str, *aliases: str) -> int:
        """A required size that later divides or multiplies (heads, widths): positive."""
        value = self.req_int(key, *aliases)
        if value <= 0:
            given = next(k for k in (key, *aliases) if k in self.cfg)
            raise self.error(f"field {given!r} must be positive, got {value}")
        return value

    def opt_int(self, key: str, default: int | None, *aliases: str) -> int | None:
        """An int, or `default` when the field is null or absent; absent from a family
        whose configuration class has its own default (CLASS_DEFAULTS), that default, as
        transformers fills it in."""
        value = self.raw(key, *aliases)
        if value is MISSING or value is None:
            return default
        return self.check_int(key, value)

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is MISSING or value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"field {key!r} must be true or false, got {value!r}")
        return value

    def kv_heads_required(self, heads: int) -> int:
        """A family whose config class defaults kv heads to a checkpoint's number.

        Absent: an error (transformers would use that other model's value);
        null: every head has its own K/V (the class's `None -> heads`).
        """
        value = self.raw("num_key_value_heads")
        if value is MISSING:
            raise self.missing(
                "num_key_value_heads", " (write null for one K/V head per query head)"
            )
        if value is None:
            return heads
        return self.check_int("num_key_value_heads", value)

    def head_dim(self, hidden: int, heads: int, required: bool = False) -> int:
        value = self.raw("head_dim")
        if value is MISSING and required:
            raise self.missing("head_dim")
        if value is MISSING or value is None:
            if hidden % heads:
                raise self.error(
                    f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads}) "
                    "and no head_dim is given"
                )
            return hidden // heads
        return self.check_int("head_dim", value)


def core_dims(c: Config) -> tuple[int, int, int, int, int]:
    """hidden_size, num_hidden_layers, num_attention_heads, vocab_size, intermediate_size:
    the sizes the Llama-style and DeepSeek configs name alike, each required positive."""
    return tuple(c.req_dim(key) for key in ("hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "vocab_size",
                                            "intermediate_size"))


def flat_fields(hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                d_ff: int, vocab: int, **kw) -> dict:
    """ModelSpec's flat fields under its own names, plus any others given by keyword."""
    return dict(layers=layers, d_model=hidden, heads=heads, kv_heads=kv_heads,
                head_dim=head_dim, d_ff=d_ff, vocab=vocab, **kw)


def latent_fields(c, mla: Latent, hidden: int, layers: int, d_ff: int, vocab: int, bias: bool,
                  context: int, **kw) -> dict:
    """An MLA model's flat fields: each query head its own K/V head, q/k as wide as the
    no-RoPE and RoPE parts, v its own width, one bias switch for q/k/v and the output,
    untied embeddings unless the config ties them, and max_position_embeddings (`context`
    its class default) read from the config `c`."""
    return flat_fields(hidden, layers, mla.heads, mla.heads, mla.nope_dim + mla.rope_dim, d_ff,
                       vocab, v_head_dim=mla.v_dim, qkv_bias=bias, out_bias=bias,
                       tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                       max_context=c.opt_int("max_position_embeddings", context) or 0, **kw)


def with_runs(fields: dict, layers: list[Layer]) -> dict:
    """The flat fields plus the runs: the runs are the model; the flat fields describe its
    attention and MLP shape for the encoder, the single-layer questions and the display."""
    return {**fields, "runs": compress(layers)}


def attention(kind: str, window: int, **kw) -> Attention:
    """Attention of `kind` ("full", "sliding" or "chunked"); a full layer keeps no window."""
    return Attention(kind=kind, window=window if kind != "full" else 0, **kw)


def required_window(c: Config, key: str = "sliding_window") -> int:
    """The window of a model that has windowed layers: required, and positive."""
    value = c.raw(key)
    if value is MISSING or value is None:
        raise c.missing(key, " (the model has windowed layers)")
    value = c.check_int(key, value)
    if value <= 0:
        raise c.error(f"field {key!r} must be positive, got {value}")
    return value


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


def mtp_note(c: Config, key: str = "num_nextn_predict_layers") -> list[str]:
    """The note for multi-token-prediction layers a checkpoint holds beside the model."""
    mtp = c.opt_int(key, 0) or 0
    return [f"{mtp} multi-token-prediction layer(s) in the checkpoint are not counted "
            "(transformers does not build them)"] if mtp else []


def dense_then_moe(c: Config, layers: int, dense: Dense, moe: MoE, first: int = 0) -> list:
    """Each layer's MLP: `mlp_layer_types` ("dense"/"sparse") when listed, else dense
    for the first `first_k_dense_replace` layers (absent: `first`) and experts after."""
    types = c.raw("mlp_layer_types")
    if types is MISSING or types is None:
        first = c.opt_int("first_k_dense_replace", first) or 0
        return [dense if i < first else moe for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("dense", "sparse") for t in types)):
        raise c.error(f"field 'mlp_layer_types' must list {layers} entries, each \"dense\" or "
                      f"\"sparse\", got {describe(types)}")
    return [moe if t == "sparse" else dense for t in types]


def sparse_layers(c: Config, layers: int) -> list[bool]:
    """Qwen2/3-MoE, OLMoE-style: layer i is sparse unless listed in mlp_only_layers, when
    num_experts > 0 and (i + 1) % decoder_sparse_step == 0 (Qwen*MoeDecoderLayer)."""
    only = c.raw("mlp_only_layers")
    only = [] if only is MISSING or only is None else only
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise c.error("field 'mlp_only_layers' must be a list of layer indices")
    step = c.opt_int("decoder_sparse_step", 1) or 1
    experts = c.opt_int("num_experts", 0) or 0
    return [i not in only and experts > 0 and (i + 1) % step == 0 for i in range(layers)]


def experts_only(c: Config, moe: MoE, *, kinds: list[str] | None = None,
                 qkv_bias: bool = False, qk_norm: bool = False, norms: int = 2,
                 context: int) -> dict:
    """A decoder whose every layer is GQA (`kinds` per layer, default all full; per-head
    q/k RMSNorms when `qk_norm`) and `moe`, with `norms` hidden-wide norms a layer."""
    hidden, layers, heads, vocab = (c.req_dim(key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
    kv_heads = c.opt_int("num_key_value_heads", heads) or heads
    head_dim = c.head_dim(hidden, heads)
    kinds = kinds or ["full"] * layers
    window = required_window(c) if "sliding" in kinds else 0
    layer_list = [Layer(attention(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                  qkv_bias=qkv_bias, qk_norm=2 * head_dim if qk_norm else 0),
                        moe, norms) for k in kinds]
    fields = flat_fields(hidden, layers, heads, kv_heads, head_dim, moe.expert_d_ff, vocab,
                         qkv_bias=qkv_bias, qk_norm=qk_norm, norms_per_layer=norms,
                         tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                         max_context=c.opt_int("max_position_embeddings", context) or 0,
                         notes=[])
    return with_runs(fields, layer_list)
