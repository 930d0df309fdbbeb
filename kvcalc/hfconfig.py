"""ModelSpec from a local Hugging Face `config.json`, read as transformers reads it.

Each supported `model_type` is mapped field by field, following that family's
`configuration_*.py` (defaults) and `modeling_*.py` (which modules exist, their
shapes and biases) in huggingface/transformers. Nothing is downloaded: the file
must already be on disk.

Two kinds of field:
- required: dimensions a config written by `save_pretrained` always carries
  (layers, widths, heads, vocab) and any whose transformers default is some
  particular checkpoint's number (Mistral's `num_key_value_heads=8`, Gemma's
  `head_dim=256`, Mistral's `sliding_window=4096`). Missing: a KvcalcError
  naming the field, rather than a silent guess.
- optional: flags and derived values, filled in as the config class does
  (`num_key_value_heads: null` -> heads; `n_inner: null` -> 4 x width;
  `tie_word_embeddings` absent -> the family's default).

Conventions for the spec:
- head_dim: `head_dim` when present and not null, else hidden_size // heads
  (Falcon, GPT-2, GPT-BigCode, GPT-NeoX and OPT always use hidden // heads).
- MLA (DeepSeek-V2/V3): kv_heads = heads and head_dim = qk_nope + qk_rope
  describe the query/key heads; the cache is `mla.kv_lora_rank +
  mla.qk_rope_head_dim` per token per layer and does not use kv_heads/head_dim.
- sliding_window is set only when the model's attention uses it; global_every
  describes Gemma 2's alternation (layer i slides when i is even).

No torch, pandas or transformers import: this is plain dict reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from kvcalc.errors import KvcalcError, os_problem, value_problem
from kvcalc.inputfile import read_text
from kvcalc.layers import Attention, Dense, GatedDeltaNet, Layer, Mamba, Mamba2, NoMixer, ShortConv
from kvcalc.layers import MoE
from kvcalc.dtypes import MAX_LAYERS, MAX_WIDTH
from kvcalc.spec import MLA, ModelSpec, compress
from kvcalc.spec import MoE as FlatMoE

_MISSING = object()


def _json_kind(value: Any) -> str:
    """What a JSON document holds, in words: null, a list, a number, a string, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(value), "something else")


def _describe(value: Any) -> str:
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


# Fields that count layers: each may become a per-layer list.
_LAYER_COUNT_KEYS = frozenset({
    "num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers",
    "decoder_layers", "encoder_layers", "num_encoder_layers", "num_nextn_predict_layers",
    "first_k_dense_replace", "max_window_layers"})
# Any other integer: widths, counts and ids stay far below it; products of a few of them
# stay exact and fit numpy's int64 in a sweep.
_MAX_CONFIG_INT = MAX_WIDTH * 1_000_000


class _Config:
    """Typed access to one config dict, with errors that name the field."""

    def __init__(self, cfg: dict, model_type: str, where: str) -> None:
        self.cfg = cfg
        self.model_type = model_type
        self.where = where

    def error(self, message: str) -> KvcalcError:
        return KvcalcError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        return key in self.cfg

    def raw(self, key: str, *aliases: str) -> Any:
        """The value under `key` (or the first alias present), or _MISSING."""
        for k in (key, *aliases):
            if k in self.cfg:
                return self.cfg[k]
        return _MISSING

    def _missing(self, key: str, why: str = "") -> KvcalcError:
        return self.error(
            f"missing required field {key!r} for model_type {self.model_type!r}{why}"
        )

    def _check_int(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"field {key!r} must be an integer, got {_describe(value)}")
        # Bounded here, before any reader builds a per-layer list from it: 10^7 layers
        # once took minutes and gigabytes to refuse, 2^63 overflowed range().
        upper = MAX_LAYERS if key in _LAYER_COUNT_KEYS else _MAX_CONFIG_INT
        if abs(value) > upper:
            what = f"{upper:,} layers" if upper == MAX_LAYERS else f"{upper:,}"
            raise self.error(f"field {key!r} is over the {what} kvcalc reads")
        return value

    def req_int(self, key: str, *aliases: str, why: str = "") -> int:
        value = self.raw(key, *aliases)
        if value is _MISSING or value is None:
            raise self._missing(key, why)
        return self._check_int(key, value)

    def req_dim(self, key: str, *aliases: str) -> int:
        """A required size that later divides or multiplies (heads, widths): positive."""
        value = self.req_int(key, *aliases)
        if value <= 0:
            given = next(k for k in (key, *aliases) if k in self.cfg)
            raise self.error(f"field {given!r} must be positive, got {value}")
        return value

    def opt_int(self, key: str, default: int | None, *aliases: str) -> int | None:
        """An int, or `default` when the field is absent or null."""
        value = self.raw(key, *aliases)
        if value is _MISSING or value is None:
            return default
        return self._check_int(key, value)

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is _MISSING or value is None:
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
        if value is _MISSING:
            raise self._missing(
                "num_key_value_heads", " (write null for one K/V head per query head)"
            )
        if value is None:
            return heads
        return self._check_int("num_key_value_heads", value)

    def head_dim(self, hidden: int, heads: int, required: bool = False) -> int:
        value = self.raw("head_dim")
        if value is _MISSING and required:
            raise self._missing("head_dim")
        if value is _MISSING or value is None:
            if hidden % heads:
                raise self.error(
                    f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads}) "
                    "and no head_dim is given"
                )
            return hidden // heads
        return self._check_int("head_dim", value)


def _window_from_layer_types(c: _Config, layers: int, window: int) -> tuple[int, int]:
    """(sliding_window, global_every) from an explicit per-layer `layer_types` list."""
    types = c.raw("layer_types")
    if not isinstance(types, list) or len(types) != layers:
        raise c.error(f"field 'layer_types' must be a list of {layers} entries")
    odd = next((t for t in types if not isinstance(t, str)), None)
    if odd is not None:
        raise c.error(f"field 'layer_types' must list strings, got {_describe(odd)}")
    sliding = [t == "sliding_attention" for t in types]
    unknown = {t for t in types if t not in ("sliding_attention", "full_attention")}
    if unknown:
        raise c.error(f"layer_types has unsupported entries: {sorted(unknown)}")
    if not any(sliding):
        return 0, 0
    if not window:
        raise c.error("layer_types has sliding layers but sliding_window is null")
    if all(sliding):
        return window, 0
    # Every n-th layer global (layers n-1, 2n-1, ...), as ModelSpec.global_every means.
    for n in range(2, layers + 1):
        if all(s == bool((i + 1) % n) for i, s in enumerate(sliding)):
            return window, n
    raise c.error(
        "layer_types mixes sliding and full layers in a pattern kvcalc cannot describe "
        "(it supports all-sliding, or every n-th layer global)"
    )


def _qwen_window(c: _Config, layers: int) -> tuple[int, int, str]:
    """Qwen2/Qwen3: layers with index >= max_window_layers slide, if use_sliding_window."""
    if c.has("layer_types") and c.raw("layer_types") is not None:
        use = c.opt_bool("use_sliding_window", False)
        window = c.opt_int("sliding_window", 0) if use else 0
        sw, every = _window_from_layer_types(c, layers, window or 0)
        return sw, every, ""
    if not c.opt_bool("use_sliding_window", False):
        return 0, 0, "use_sliding_window is false: full attention in every layer"
    window = c.req_int("sliding_window", why=" (use_sliding_window is true)")
    first = c.req_int("max_window_layers", why=" (use_sliding_window is true)")
    if first <= 0:
        return window, 0, ""
    if first >= layers:
        return 0, 0, f"max_window_layers={first} >= layers: no layer slides"
    raise c.error(
        f"use_sliding_window with max_window_layers={first} of {layers} layers (the first "
        f"{first} full, the rest sliding) is a pattern kvcalc cannot describe"
    )


def _core_dims(c: _Config) -> tuple[int, int, int, int, int]:
    """hidden_size, num_hidden_layers, num_attention_heads, vocab_size, intermediate_size:
    the sizes the Llama-style and DeepSeek configs name alike, each required positive."""
    return tuple(c.req_dim(key) for key in ("hidden_size", "num_hidden_layers",
                                             "num_attention_heads", "vocab_size",
                                             "intermediate_size"))


def _llama_like(c: _Config, family: str) -> dict:
    """Llama, Mistral, Mixtral, Qwen2/3, Gemma/Gemma 2, Phi-3: RoPE, RMSNorm, gated MLP."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
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
        if value is _MISSING:
            raise c._missing("sliding_window", " (write null for full attention)")
        sw = 0 if value is None else c._check_int("sliding_window", value)
    elif family in ("mixtral", "phi3"):
        # Default None; when set, every layer's attention uses it.
        sw = c.opt_int("sliding_window", 0) or 0
    elif family in ("qwen2", "qwen3"):
        sw, every, note = _qwen_window(c, layers)
        if note:
            notes.append(note)
    elif family == "gemma2":
        value = c.raw("sliding_window")
        if value is _MISSING:
            raise c._missing("sliding_window")
        window = 0 if value is None else c._check_int("sliding_window", value)
        if c.raw("layer_types") not in (_MISSING, None):
            sw, every = _window_from_layer_types(c, layers, window)
        elif window:
            # Gemma2DecoderLayer: is_sliding = not bool(layer_idx % 2).
            sw, every = window, 2
            notes.append("Gemma 2: even layers slide, odd layers attend globally")
    out.update(sliding_window=sw, global_every=every if sw else 0)

    if family == "mixtral":
        experts = c.req_int("num_local_experts")
        out["moe"] = FlatMoE(
            experts=experts,
            active=c.req_int("num_experts_per_tok"),
            expert_d_ff=d_ff,  # each expert is a w1/w3/w2 gated MLP of intermediate_size
            shared_experts=0,
            dense_layers=0,
            router_bias=False,  # gate: Linear(hidden, num_local_experts, bias=False)
        )
    out["notes"] = notes
    return out


def _deepseek(c: _Config, family: str) -> dict:
    """DeepSeek-V2/V3: MLA attention, DeepSeekMoE after `first_k_dense_replace` layers."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    mla = MLA(
        kv_lora_rank=c.req_int("kv_lora_rank"),
        qk_rope_head_dim=c.req_int("qk_rope_head_dim"),
        qk_nope_head_dim=c.req_int("qk_nope_head_dim"),
        v_head_dim=c.req_int("v_head_dim"),
        q_lora_rank=c.opt_int("q_lora_rank", 0) or 0,  # null: full-rank q_proj
    )
    notes = [
        "MLA: kv_heads and head_dim describe the query/key heads; the cache holds "
        f"kv_lora_rank + qk_rope_head_dim = {mla.kv_lora_rank + mla.qk_rope_head_dim} "
        "elements per token per layer"
    ]
    moe = None
    routed = c.opt_int("n_routed_experts", None)
    if routed:
        freq = c.opt_int("moe_layer_freq", 1)
        if freq != 1:
            raise c.error(f"moe_layer_freq={freq}: only 1 (every layer after the dense ones) "
                          "is supported")
        moe = FlatMoE(
            experts=routed,
            active=c.req_int("num_experts_per_tok"),
            expert_d_ff=c.req_int("moe_intermediate_size"),
            shared_experts=c.opt_int("n_shared_experts", 0) or 0,
            dense_layers=c.opt_int("first_k_dense_replace", 0) or 0,
            # DeepSeek-V3's router has a per-expert e_score_correction_bias (noaux_tc
            # routing), which transformers 5 holds as a buffer, not a parameter: it is
            # not counted (256 values a layer). V2's gate is a bias-free Linear.
            router_bias=False,
        )
    mtp = c.opt_int("num_nextn_predict_layers", 0) or 0
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) in the checkpoint are not counted "
                     "(transformers does not load them)")
    bias = c.opt_bool("attention_bias", False)
    return dict(
        layers=layers, d_model=hidden, heads=heads, kv_heads=heads,
        head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim,
        d_ff=d_ff, vocab=vocab, mlp="gated", norm="rmsnorm", norms_per_layer=2,
        qkv_bias=bias, out_bias=bias,
        # MiniCPM3Config ties the embeddings by default; DeepSeek's configs do not.
        tied_embeddings=c.opt_bool("tie_word_embeddings", family == "minicpm3"),
        max_context=c.opt_int("max_position_embeddings",
                              {"deepseek_v2": 2048, "minicpm3": 32768}.get(family, 4096)) or 0,
        mla=mla, moe=moe, notes=notes,
    )


def _falcon(c: _Config, family: str) -> dict:
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


def _gpt2_like(c: _Config, family: str) -> dict:
    """GPT-2 and GPT-BigCode: learned positions, Conv1D/Linear with biases, plain MLP."""
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


def _gpt_neox(c: _Config, family: str) -> dict:
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


def _opt(c: _Config, family: str) -> dict:
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


# --------------------------------------------------------------------------------
# Families whose layers differ: each adapter lists its layers, one Layer per index
# --------------------------------------------------------------------------------
def _layered(fields: dict, layers: list[Layer]) -> dict:
    """Flat fields plus the runs; the flat fields then describe the attention layers."""
    fields["runs"] = compress(layers)
    return fields


def _types_list(c: _Config, layers: int, allowed: dict[str, str]) -> list[str] | None:
    """`layer_types` mapped through `allowed` (config name -> kvcalc kind), or None if absent."""
    types = c.raw("layer_types")
    if types is _MISSING or types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise c.error(f"field 'layer_types' must be a list of {layers} entries")
    odd = next((t for t in types if not isinstance(t, str)), None)
    if odd is not None:
        raise c.error(f"field 'layer_types' must list strings, got {_describe(odd)}")
    unknown = sorted({t for t in types if t not in allowed})
    if unknown:
        raise c.error(f"layer_types has entries kvcalc does not know for model_type "
                      f"{c.model_type!r}: {unknown}")
    return [allowed[t] for t in types]


_ATTN_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
               "chunked_attention": "chunked"}


def _window_req(c: _Config, key: str = "sliding_window") -> int:
    value = c.raw(key)
    if value is _MISSING or value is None:
        raise c._missing(key, " (the model has windowed layers)")
    value = c._check_int(key, value)
    if value <= 0:
        raise c.error(f"field {key!r} must be positive, got {value}")
    return value


def _attn(kind: str, window: int, **kw) -> Attention:
    return Attention(kind=kind, window=window if kind != "full" else 0, **kw)


def _flat(c: _Config, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
          d_ff: int, vocab: int, **kw) -> dict:
    return dict(layers=layers, d_model=hidden, heads=heads, kv_heads=kv_heads,
                head_dim=head_dim, d_ff=d_ff, vocab=vocab, **kw)


def _moe_indices(c: _Config, layers: int) -> list[bool]:
    """Qwen2/3-MoE, OLMoE-style: layer i is sparse unless listed in mlp_only_layers, when
    num_experts > 0 and (i + 1) % decoder_sparse_step == 0 (Qwen*MoeDecoderLayer)."""
    only = c.raw("mlp_only_layers")
    only = [] if only is _MISSING or only is None else only
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise c.error("field 'mlp_only_layers' must be a list of layer indices")
    step = c.opt_int("decoder_sparse_step", 1) or 1
    experts = c.opt_int("num_experts", 0) or 0
    return [i not in only and experts > 0 and (i + 1) % step == 0 for i in range(layers)]


def _gemma3(c: _Config, family: str) -> dict:
    """Gemma 3 (Gemma3TextConfig): 5 sliding : 1 global by default (sliding_window_pattern
    6: layer i slides when (i + 1) % 6), q/k RMSNorms, four norms per layer, tied."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = _types_list(c, layers, _ATTN_TYPES)
    if kinds is None:
        pattern = c.opt_int("sliding_window_pattern", 6) or 6
        kinds = ["sliding" if (i + 1) % pattern else "full" for i in range(layers)]
    window = _window_req(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", False)
    mlp = Dense(d_ff, gated=True)
    layer_list = [Layer(_attn(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              qkv_bias=bias, out_bias=bias, qk_norm=2 * head_dim), mlp, 4)
                  for k in kinds]
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          mlp="gated", norm="rmsnorm", norms_per_layer=4,
                          qkv_bias=bias, out_bias=bias, qk_norm=True, sliding_window=window,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                          notes=[]), layer_list)


def _cohere(c: _Config, family: str) -> dict:
    """Cohere (Command R) and Cohere2 (Command R7B): one weight-only LayerNorm per layer
    (attention and MLP in parallel), tied embeddings; Cohere2 slides on 3 of 4 layers."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    bias = c.opt_bool("attention_bias", False)
    qk = (heads + kv_heads) * head_dim if c.opt_bool("use_qk_norm", False) else 0
    if family == "cohere2":
        kinds = _types_list(c, layers, _ATTN_TYPES)
        if kinds is None:
            pattern = c.opt_int("sliding_window_pattern", 4) or 4
            kinds = ["sliding" if (i + 1) % pattern else "full" for i in range(layers)]
    else:
        kinds = ["full"] * layers
    window = _window_req(c) if "sliding" in kinds else 0
    layer_list = [Layer(_attn(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              qkv_bias=bias, out_bias=bias, qk_norm=qk), Dense(d_ff), 1)
                  for k in kinds]
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          norm="layernorm", norm_bias=False, norms_per_layer=1,
                          qkv_bias=bias, out_bias=bias, sliding_window=window,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          max_context=c.opt_int("max_position_embeddings", 8192) or 0,
                          notes=["attention and MLP in parallel, one LayerNorm per layer"]),
                    layer_list)


def _gpt_oss(c: _Config, family: str) -> dict:
    """gpt-oss: alternating sliding (128) and full layers, per-head attention sinks,
    biased q/k/v/o, every layer MoE with biased router and experts."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = _types_list(c, layers, _ATTN_TYPES)
    if kinds is None:  # GptOssConfig: sliding on even layers, full on odd
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    window = _window_req(c) if "sliding" in kinds else 0
    bias = c.opt_bool("attention_bias", True)
    moe = MoE(experts=c.req_int("num_local_experts"),
              active=c.req_int("num_experts_per_tok", "experts_per_token"),
              expert_d_ff=d_ff, router_bias=True, expert_bias=True)
    layer_list = [Layer(_attn(k, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              qkv_bias=bias, out_bias=bias, sinks=True), moe, 2)
                  for k in kinds]
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=bias, sliding_window=window,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 131072) or 0,
                          notes=["attention sinks: one learned logit per query head "
                                 "(parameters, not cached tokens)"]), layer_list)


def _llama4(c: _Config, family: str) -> dict:
    """Llama 4 text model: chunked local attention on RoPE layers (no_rope_layers: 1 =
    RoPE, default every 4th layer NoPE and global), MoE on moe_layers (default every
    interleave_moe_layer_step-th), a shared expert, dense layers of intermediate_size_mlp."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    kinds = _types_list(c, layers, _ATTN_TYPES)
    if kinds is None:
        rope = c.raw("no_rope_layers")
        if rope is _MISSING or not rope:
            every = c.opt_int("no_rope_layer_interval", 4) or 4
            rope = [int((i + 1) % every != 0) for i in range(layers)]
        if not isinstance(rope, list) or len(rope) != layers:
            raise c.error(f"field 'no_rope_layers' must be a list of {layers} entries")
        kinds = ["chunked" if r else "full" for r in rope]
    chunk = c.opt_int("attention_chunk_size", 8192)
    if "chunked" in kinds and not chunk:
        kinds = ["full"] * layers  # no chunk size: every layer attends globally
    moe_at = c.raw("moe_layers")
    if moe_at is _MISSING or moe_at is None:
        step = c.opt_int("interleave_moe_layer_step", 1) or 1
        moe_at = list(range(step - 1, layers, step))
    bias = c.opt_bool("attention_bias", False)
    moe = MoE(experts=c.req_int("num_local_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=d_ff, shared_experts=1)
    dense = Dense(c.opt_int("intermediate_size_mlp", 16384) or d_ff)
    layer_list = [Layer(_attn(k, chunk or 0, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              qkv_bias=bias, out_bias=bias),
                        moe if i in moe_at else dense, 2) for i, k in enumerate(kinds)]
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=bias,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 4096 * 32) or 0,
                          notes=[f"chunked local attention ({chunk:,}-token chunks) on RoPE "
                                 "layers, global attention on NoPE layers"] if chunk else []),
                    layer_list)


def _qwen_moe(c: _Config, family: str) -> dict:
    """Qwen2-MoE / Qwen3-MoE / OLMoE: routed experts of moe_intermediate_size on the
    sparse layers; Qwen2-MoE adds a gated shared expert; Qwen3 and OLMoE q/k norms."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = c.head_dim(hidden, heads)
    if family == "olmoe":
        sparse = [True] * layers
        experts = c.req_int("num_experts")
        expert_ff = d_ff
    else:
        sparse = _moe_indices(c, layers)
        experts = c.opt_int("num_experts", 0) or 0
        expert_ff = c.req_int("moe_intermediate_size") if experts else d_ff
    shared = 0
    shared_ff = 0
    if family == "qwen2_moe":
        shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
        shared = 1 if shared_ff else 0
    qkv_bias = c.opt_bool("qkv_bias", True) if family == "qwen2_moe" else c.opt_bool(
        "attention_bias", False)
    out_bias = False if family == "qwen2_moe" else qkv_bias
    qk = {"qwen3_moe": 2 * head_dim, "olmoe": hidden + kv_heads * head_dim}.get(family, 0)
    moe = MoE(experts=experts, active=c.req_int("num_experts_per_tok"), expert_d_ff=expert_ff,
              shared_experts=shared, shared_d_ff=shared_ff, shared_gate=bool(shared)) if experts else None
    dense = Dense(d_ff)
    window = 0
    if family != "olmoe" and c.opt_bool("use_sliding_window", False):
        raise c.error("use_sliding_window is true: sliding layers in MoE Qwen configs are "
                      "not supported")
    attn = Attention(heads=heads, kv_heads=kv_heads, head_dim=head_dim, qkv_bias=qkv_bias,
                     out_bias=out_bias, qk_norm=qk)
    layer_list = [Layer(attn, moe if (s and moe) else dense, 2) for s in sparse]
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=qkv_bias, out_bias=out_bias, qk_norm=bool(qk),
                          sliding_window=window,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                          notes=[]), layer_list)


def _olmo(c: _Config, family: str) -> dict:
    """OLMo: LayerNorms without parameters. OLMo 2: no input norm, post-attention and
    post-feedforward RMSNorms, q/k RMSNorms over all heads' width."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
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
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=bias, norms_per_layer=norms, final_norm=final,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                          notes=["OLMo's LayerNorms have no parameters"] if family == "olmo"
                          else []), [Layer(attn, Dense(d_ff), norms)] * layers)


def _phi(c: _Config, family: str) -> dict:
    """Phi-1/2: parallel attention and MLP after one LayerNorm, biases everywhere, a
    biased lm_head."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    qk = 2 * head_dim * 2 if c.opt_bool("qk_layernorm", False) else 0  # LayerNorm w + b, q and k
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=True, out_bias=True, qk_norm=qk)
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                          norm="layernorm", norm_bias=True, norms_per_layer=1,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          extra_params=vocab,  # lm_head bias
                          max_context=c.opt_int("max_position_embeddings", 2048) or 0,
                          notes=["parallel attention and MLP share one LayerNorm; "
                                 "lm_head has a bias"]),
                    [Layer(attn, Dense(d_ff, gated=False, bias=True), 1)] * layers)


def _gptj(c: _Config, family: str) -> dict:
    """GPT-J: bias-free q/k/v/out, biased fc_in/fc_out, one LayerNorm per layer
    (parallel), a biased lm_head."""
    hidden = c.req_dim("n_embd", "hidden_size")
    layers = c.req_dim("n_layer", "num_hidden_layers")
    heads = c.req_dim("n_head", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    inner = c.opt_int("n_inner", None)
    d_ff = inner if inner is not None else 4 * hidden
    head_dim = hidden // heads
    return _layered(_flat(c, hidden, layers, heads, heads, head_dim, d_ff, vocab,
                          mlp="plain", mlp_bias=True, norm="layernorm", norm_bias=True,
                          norms_per_layer=1,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          extra_params=vocab,  # lm_head bias
                          max_context=c.opt_int("n_positions", 2048) or 0,
                          notes=["parallel attention and MLP share one LayerNorm; "
                                 "lm_head has a bias"]),
                    [Layer(Attention(heads, heads, head_dim), Dense(d_ff, False, True), 1)] * layers)


def _starcoder2(c: _Config, family: str) -> dict:
    """StarCoder2: GQA with biases (use_bias), plain biased MLP, LayerNorms, optional window."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    bias = c.opt_bool("use_bias", True)
    window = c.opt_int("sliding_window", 0) or 0
    kind = "sliding" if window else "full"
    attn = _attn(kind, window, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                 qkv_bias=bias, out_bias=bias)
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          mlp="plain", mlp_bias=bias, qkv_bias=bias, out_bias=bias,
                          norm="layernorm", norm_bias=True, sliding_window=window,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                          notes=[]), [Layer(attn, Dense(d_ff, False, bias), 2)] * layers)


def _dt_rank(c: _Config, key: str, hidden: int) -> int:
    value = c.raw(key)
    if value is _MISSING or value is None or value == "auto":
        return -(-hidden // 16)  # math.ceil(hidden_size / 16), as the config classes do
    return c._check_int(key, value)


def _mamba(c: _Config, family: str) -> dict:
    """Mamba / Falcon-Mamba: every layer one Mamba mixer after one RMSNorm, no MLP."""
    hidden = c.req_dim("hidden_size")
    layers = c.req_dim("num_hidden_layers")
    vocab = c.req_dim("vocab_size")
    d_inner = c.opt_int("intermediate_size", None) or int(c.raw("expand") if c.has("expand") else 2) * hidden
    mixer = Mamba(d_inner=d_inner, d_state=c.opt_int("state_size", 16) or 16,
                  d_conv=c.opt_int("conv_kernel", 4) or 4, dt_rank=_dt_rank(c, "time_step_rank", hidden),
                  conv_bias=c.opt_bool("use_conv_bias", True), proj_bias=c.opt_bool("use_bias", False))
    return _layered(_flat(c, hidden, layers, 1, 1, hidden, d_inner, vocab,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          notes=["state-space model: a constant state per sequence, no KV cache"]),
                    [Layer(mixer, None, 1)] * layers)


def _jamba(c: _Config, family: str) -> dict:
    """Jamba: attention on layers with i % attn_layer_period == attn_layer_offset, Mamba
    elsewhere; MoE where i % expert_layer_period == expert_layer_offset."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
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
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 262144) or 0,
                          notes=[f"hybrid: attention on 1 of {a_period} layers, Mamba on the rest"]),
                    layer_list)


def _llama_variants(c: _Config, family: str) -> dict:
    """Granite, GraniteMoE, StableLM, Nemotron, PhiMoE: Llama-shaped decoders with their
    own norms (StableLM/Nemotron/PhiMoE LayerNorms with bias), MLP kind and MoE."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
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
    attn = _attn("sliding" if window else "full", window, heads=heads, kv_heads=kv_heads,
                 head_dim=head_dim, qkv_bias=bias, out_bias=out_bias, qk_norm=qk)
    extra = vocab if family == "phimoe" and c.opt_bool("lm_head_bias", False) else 0
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=out_bias, mlp_bias=mlp_bias,
                          norm="layernorm" if layernorm else "rmsnorm", norm_bias=layernorm,
                          norms_per_layer=norms, sliding_window=window, extra_params=extra,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                          notes=notes), [Layer(attn, mlp, norms)] * layers)


def _bloom(c: _Config, family: str) -> dict:
    """BLOOM: ALiBi, a LayerNorm right after the embedding, fused biased qkv, tied."""
    hidden = c.req_dim("hidden_size", "n_embed")
    layers = c.req_dim("n_layer", "num_hidden_layers")
    heads = c.req_dim("n_head", "num_attention_heads")
    vocab = c.req_dim("vocab_size")
    head_dim = hidden // heads
    attn = Attention(heads, heads, head_dim, qkv_bias=True, out_bias=True)
    return _layered(_flat(c, hidden, layers, heads, heads, head_dim, 4 * hidden, vocab,
                          mlp="plain", mlp_bias=True, qkv_bias=True, out_bias=True,
                          norm="layernorm", norm_bias=True, embedding_norm=True,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          notes=["ALiBi positions; a LayerNorm follows the embedding"]),
                    [Layer(attn, Dense(4 * hidden, False, True), 2)] * layers)


def _gpt_neo(c: _Config, family: str) -> dict:
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
    return _layered(_flat(c, hidden, layers, heads, heads, head_dim, d_ff, vocab,
                          mlp="plain", mlp_bias=True, out_bias=True, norm="layernorm",
                          norm_bias=True, learned_pos=positions, max_context=positions,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          notes=["GPT-Neo's local layers mask a window but cache every token"]),
                    [Layer(attn, Dense(d_ff, False, True), 2)] * layers)


def _mpt(c: _Config, family: str) -> dict:
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
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, ratio * hidden, vocab,
                          mlp="plain", mlp_bias=not no_bias, qkv_bias=not no_bias,
                          out_bias=not no_bias, norm="layernorm", norm_bias=not no_bias,
                          learned_pos=0 if alibi or not c.opt_bool("learned_pos_emb", True) else positions,
                          max_context=positions, tied_embeddings=True, notes=[]),
                    [Layer(attn, Dense(ratio * hidden, False, not no_bias), 2)] * layers)


def _lfm2(c: _Config, family: str) -> dict:
    """LFM2: gated short-convolution layers and GQA attention layers (layer_types or
    full_attn_idxs); SwiGLU width auto-adjusted as Lfm2MLP does; q/k LayerNorms."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.opt_int("num_key_value_heads", heads)
    head_dim = hidden // heads
    kinds = _types_list(c, layers, {"full_attention": "full", "conv": "conv"})
    if kinds is None:
        idxs = c.raw("full_attn_idxs")
        idxs = list(range(layers)) if idxs is _MISSING or idxs is None else idxs
        kinds = ["full" if i in idxs else "conv" for i in range(layers)]
    if c.opt_bool("block_auto_adjust_ff_dim", True):
        d_ff = int(2 * d_ff / 3)
        mult = c.raw("block_ffn_dim_multiplier")
        if isinstance(mult, (int, float)) and not isinstance(mult, bool):
            d_ff = int(mult * d_ff)
        step = c.opt_int("block_multiple_of", 256) or 1
        d_ff = step * -(-d_ff // step)
    conv = ShortConv(width=hidden, kernel=c.opt_int("conv_L_cache", 3) or 3,
                     bias=c.opt_bool("conv_bias", False))
    attn = Attention(heads, kv_heads, head_dim, qk_norm=2 * head_dim)
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", True),
                          max_context=c.opt_int("max_position_embeddings", 128000) or 0,
                          notes=["hybrid: short-convolution layers hold a constant state"]),
                    [Layer(attn if k == "full" else conv, Dense(d_ff), 2) for k in kinds])


def _qwen3_next(c: _Config, family: str) -> dict:
    """Qwen3-Next: Gated DeltaNet linear attention on 3 of 4 layers (layer_types, else
    full_attention_interval), gated full attention with q/k norms on the rest; MoE with
    a gated shared expert (sparse layers as Qwen MoE)."""
    hidden, layers, heads, vocab, d_ff = _core_dims(c)
    kv_heads = c.kv_heads_required(heads)
    head_dim = c.head_dim(hidden, heads, required=True)
    kinds = _types_list(c, layers, {"full_attention": "full", "linear_attention": "linear"})
    if kinds is None:
        every = c.opt_int("full_attention_interval", 4) or 4
        kinds = ["full" if (i + 1) % every == 0 else "linear" for i in range(layers)]
    linear = GatedDeltaNet(k_heads=c.req_int("linear_num_key_heads"),
                           v_heads=c.req_int("linear_num_value_heads"),
                           k_dim=c.req_int("linear_key_head_dim"),
                           v_dim=c.req_int("linear_value_head_dim"),
                           conv_kernel=c.opt_int("linear_conv_kernel_dim", 4) or 4)
    bias = c.opt_bool("attention_bias", False)
    attn = Attention(heads, kv_heads, head_dim, qkv_bias=bias, out_bias=bias,
                     qk_norm=2 * head_dim, gated=True)
    sparse = _moe_indices(c, layers)
    shared_ff = c.opt_int("shared_expert_intermediate_size", 0) or 0
    moe = MoE(experts=c.req_int("num_experts"), active=c.req_int("num_experts_per_tok"),
              expert_d_ff=c.req_int("moe_intermediate_size"), shared_experts=1 if shared_ff else 0,
              shared_d_ff=shared_ff, shared_gate=bool(shared_ff))
    return _layered(_flat(c, hidden, layers, heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=bias, qk_norm=True,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 32768) or 0,
                          notes=["hybrid: Gated DeltaNet linear attention holds a constant "
                                 "state; full attention layers cache every token"]),
                    [Layer(attn if k == "full" else linear, moe if sp else Dense(d_ff), 2)
                     for k, sp in zip(kinds, sparse)])


def _nemotron_h(c: _Config, family: str) -> dict:
    """Nemotron-H: one block per layer, each a Mamba-2 mixer, attention, an MLP or a MoE
    after one RMSNorm (layers_block_type, or the older hybrid_override_pattern string
    M/*/-/E). MLP and MoE blocks cache nothing."""
    hidden = c.req_dim("hidden_size")
    vocab = c.req_dim("vocab_size")
    types = c.raw("layers_block_type", "layer_types")
    if types is _MISSING or types is None:
        pattern = c.raw("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern:
            raise c._missing("layers_block_type", " (or hybrid_override_pattern)")
        table = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
        bad = sorted(set(pattern) - set(table))
        if bad:
            raise c.error(f"hybrid_override_pattern has characters kvcalc does not know: {bad}")
        types = [table[ch] for ch in pattern]
    if not isinstance(types, list) or not types:
        raise c.error("field 'layers_block_type' must be a non-empty list")
    allowed = {"linear_attention", "moe", "full_attention", "mlp"}
    unknown = sorted({t for t in types if t not in allowed} if all(isinstance(t, str) for t in types)
                     else {"(not a string)"})
    if unknown:
        raise c.error(f"layers_block_type has entries kvcalc does not know: {unknown}")
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
            gated=False), 1)
    return _layered(_flat(c, hidden, len(types), heads, kv_heads, head_dim, d_ff, vocab,
                          qkv_bias=bias, out_bias=bias, norms_per_layer=1,
                          tied_embeddings=c.opt_bool("tie_word_embeddings", False),
                          max_context=c.opt_int("max_position_embeddings", 4096) or 0,
                          notes=["hybrid: Mamba-2 layers hold a constant state; MLP and MoE "
                                 "blocks cache nothing"]),
                    [blocks[t] for t in types])


_FAMILIES: dict[str, Callable[[_Config, str], dict]] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "mixtral": _llama_like,
    "qwen2": _llama_like,
    "qwen3": _llama_like,
    "gemma": _llama_like,
    "gemma2": _llama_like,
    "phi3": _llama_like,
    "falcon": _falcon,
    "gpt2": _gpt2_like,
    "gpt_bigcode": _gpt2_like,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gemma3_text": _gemma3,
    "cohere": _cohere,
    "cohere2": _cohere,
    "gpt_oss": _gpt_oss,
    "llama4_text": _llama4,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "olmoe": _qwen_moe,
    "olmo": _olmo,
    "olmo2": _olmo,
    "phi": _phi,
    "gptj": _gptj,
    "starcoder2": _starcoder2,
    "mamba": _mamba,
    "falcon_mamba": _mamba,
    "jamba": _jamba,
    "granite": _llama_variants,
    "granitemoe": _llama_variants,
    "stablelm": _llama_variants,
    "nemotron": _llama_variants,
    "phimoe": _llama_variants,
    "bloom": _bloom,
    "gpt_neo": _gpt_neo,
    "mpt": _mpt,
    "lfm2": _lfm2,
    "qwen3_next": _qwen3_next,
    "minicpm3": _deepseek,
    "nemotron_h": _nemotron_h,
}

# Multimodal configs: the language model is `text_config` (model_type defaulted as
# the wrapper's config class does); vision towers and projectors are reported apart.
_WRAPPERS = {
    "llava": "llama", "llava_next": "llama", "mistral3": "mistral", "gemma3": "gemma3_text",
    "llama4": "llama4_text", "qwen2_5_vl": "qwen2", "qwen2_vl": "qwen2",
}
_WRAPPER_TIED = {"llava": False, "llava_next": False, "mistral3": True, "gemma3": True,
                 "llama4": False, "qwen2_5_vl": False, "qwen2_vl": False}
# LlamaConfig's defaults (Llama 2 7B), which LLaVA-1.5's short text_config relies on.
_LLAMA_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "vocab_size": 32000}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_FAMILIES) + tuple(_WRAPPERS)


def _wrapped(cfg: dict, model_type: str, name: str, source: str, where: str) -> ModelSpec:
    text = cfg.get("text_config")
    if text is None and model_type in ("qwen2_5_vl", "qwen2_vl"):
        text = {k: v for k, v in cfg.items() if k != "vision_config"}  # older flat layout
    if not isinstance(text, dict):
        raise KvcalcError(f"{where}: model_type {model_type!r} needs a 'text_config' object")
    text = dict(text)
    text.setdefault("model_type", _WRAPPERS[model_type])
    if text["model_type"] in (model_type, "qwen2_5_vl_text", "qwen2_vl_text"):
        text["model_type"] = _WRAPPERS[model_type]  # Qwen2-VL's text model is Qwen2's
    if text["model_type"] == "llama" and model_type.startswith("llava"):
        for key, value in _LLAMA_DEFAULTS.items():
            text.setdefault(key, value)
    if text["model_type"] == "gemma3_text":
        text.setdefault("vocab_size", 262_208)  # Gemma3TextConfig's default, which Gemma 3 relies on
    # The wrapper's own flag (its config class's default when absent) ties the lm_head of
    # the whole model in transformers 5, whatever text_config says.
    tied = cfg.get("tie_word_embeddings")
    text["tie_word_embeddings"] = _WRAPPER_TIED[model_type] if tied is None else tied
    spec = spec_from_hf_config(text, name, source)
    from kvcalc.towers import tower_params

    towers = tower_params(cfg, model_type, spec.d_model, where)
    if towers:
        notes = spec.notes + (f"; {model_type}: a multimodal config; the language model is "
                              f"counted, its vision tower and projector "
                              f"({sum(towers.values()):,} parameters) apart")
    else:
        notes = spec.notes + (f"; {model_type}: the language model of a multimodal config "
                              "(no vision tower formula for it: not counted)")
    extra = {**spec.extra, "hf_wrapper": model_type, "towers": towers}
    import dataclasses

    return dataclasses.replace(spec, notes=notes, extra=extra)


def _quantization_extra(cfg: dict, where: str) -> dict:
    """{"quantization": Quantization} from the config's quantization_config (kvcalc.quant);
    one kvcalc cannot read keeps its message as "quantization_error" (raised by
    kvcalc.quant.formats.quantization_of when weight bytes are asked for: the cache still loads)."""
    if cfg.get("quantization_config") is None:
        return {}
    from kvcalc.quant.formats import quantization_from_hf

    try:
        return {"quantization": quantization_from_hf(cfg, where)}
    except KvcalcError as e:
        return {"quantization_error": str(e)}


def spec_from_hf_config(cfg: dict, name: str, source: str = "") -> ModelSpec:
    """A ModelSpec from a parsed Hugging Face config dict.

    `name` becomes the spec's name and `source` its provenance (and the prefix of
    every error message). Raises KvcalcError for an unsupported model_type, a
    missing or mistyped required field, or a combination the spec cannot describe.
    """
    where = source or "config.json"
    if not isinstance(cfg, dict):
        raise KvcalcError(f"{where}: expected a JSON object ({{\"model_type\": ...}}), found "
                          f"{_json_kind(cfg)}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise KvcalcError(f"{where}: missing required field 'model_type'")
    if not isinstance(model_type, str):
        raise KvcalcError(f"{where}: field 'model_type' must be a string, got "
                          f"{_describe(model_type)}")
    if model_type in _WRAPPERS:
        spec = _wrapped(cfg, model_type, name, source, where)
        spec.extra.update(_quantization_extra(cfg, where))  # the wrapper holds quantization_config
        return spec
    if model_type not in _FAMILIES:
        remote = (" (it names remote code in 'auto_map': a model transformers itself does "
                  "not ship)" if isinstance(cfg.get("auto_map"), dict) else "")
        raise KvcalcError(
            f"{where}: model_type {model_type!r} is not one kvcalc reads{remote}; "
            f"`kvcalc presets --families` lists the {len(SUPPORTED_MODEL_TYPES)} it does"
        )
    c = _Config(cfg, model_type, where)
    fields = _FAMILIES[model_type](c, model_type)
    notes = [f"from Hugging Face config.json, model_type {model_type}", *fields.pop("notes", [])]
    extra = {"hf_model_type": model_type, **_quantization_extra(cfg, where)}
    if "runs" in fields:
        extra["explicit_runs"] = True
    try:
        return ModelSpec(
            name=name,
            source=source,
            notes="; ".join(notes),
            extra=extra,
            **fields,
        )
    except KvcalcError as e:
        raise KvcalcError(f"{where}: {e}") from None


def _default_name(path: Path, cfg: Any) -> str:
    """tests/data/hf/org__model.json -> org/model; .../org/model/config.json -> org/model."""
    if path.stem != "config":
        return path.stem.replace("__", "/")
    if isinstance(cfg, dict) and isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"]:
        return cfg["_name_or_path"]
    return path.parent.name or "config"


def spec_from_hf_config_file(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a local config.json (never downloads) and map it with spec_from_hf_config."""
    p = Path(path)
    source = f"config.json ({p})"
    try:
        text = read_text(p, str(p))
    except FileNotFoundError:
        raise KvcalcError(f"{p}: no such file (kvcalc reads a local config.json; "
                          "it never downloads)") from None
    except IsADirectoryError:
        raise KvcalcError(f"{p}: is a directory; give the path of its config.json") from None
    except UnicodeDecodeError:
        raise KvcalcError(f"{p}: cannot read: not UTF-8 text") from None
    except OSError as e:
        raise KvcalcError(f"{p}: cannot read: {os_problem(e)}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        # json's own words may end in "starting at" ("Unterminated string starting at")
        problem = e.msg.removesuffix(" at").removesuffix(" starting")
        raise KvcalcError(f"{p}: not valid JSON: {problem} at line {e.lineno} "
                          f"column {e.colno}") from None
    except RecursionError:
        raise KvcalcError(f"{p}: not valid JSON: nested too deeply") from None
    except ValueError as e:  # json.loads' int(): more digits than Python converts
        raise KvcalcError(f"{p}: not valid JSON: {value_problem(e)}") from None
    return spec_from_hf_config(cfg, name or _default_name(p, cfg), source)
