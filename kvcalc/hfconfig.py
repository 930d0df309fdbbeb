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

from kvcalc.errors import KvcalcError, quoted, value_problem
from kvcalc.inputfile import read_text
from kvcalc.spec import MLA, ModelSpec, MoE

_MISSING = object()


def _describe(value: Any) -> str:
    """A JSON value for a message: scalars as written (long ones cut), containers by kind."""
    if isinstance(value, list):
        return f"a list of {len(value):,}"
    if isinstance(value, dict):
        return f"an object of {len(value):,} keys"
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length():,}-bit integer"
    return json.dumps(value)


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
        out["moe"] = MoE(
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
        topk = c.raw("topk_method")
        moe = MoE(
            experts=routed,
            active=c.req_int("num_experts_per_tok"),
            expert_d_ff=c.req_int("moe_intermediate_size"),
            shared_experts=c.opt_int("n_shared_experts", 0) or 0,
            dense_layers=c.opt_int("first_k_dense_replace", 0) or 0,
            # DeepSeek-V3's router has a per-expert e_score_correction_bias (noaux_tc
            # routing); V2's gate is a bias-free Linear.
            router_bias=family == "deepseek_v3" or topk == "noaux_tc",
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
        tied_embeddings=c.opt_bool("tie_word_embeddings", False),
        max_context=c.opt_int("max_position_embeddings",
                              2048 if family == "deepseek_v2" else 4096) or 0,
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
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_FAMILIES)


def spec_from_hf_config(cfg: dict, name: str, source: str = "") -> ModelSpec:
    """A ModelSpec from a parsed Hugging Face config dict.

    `name` becomes the spec's name and `source` its provenance (and the prefix of
    every error message). Raises KvcalcError for an unsupported model_type, a
    missing or mistyped required field, or a combination the spec cannot describe.
    """
    where = source or "config.json"
    if not isinstance(cfg, dict):
        raise KvcalcError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise KvcalcError(f"{where}: missing required field 'model_type'")
    if not isinstance(model_type, str):
        raise KvcalcError(f"{where}: field 'model_type' must be a string, got "
                          f"{_describe(model_type)}")
    if model_type not in _FAMILIES:
        raise KvcalcError(
            f"{where}: unsupported model_type {model_type!r}; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    c = _Config(cfg, model_type, where)
    fields = _FAMILIES[model_type](c, model_type)
    notes = [f"from Hugging Face config.json, model_type {model_type}", *fields.pop("notes", [])]
    try:
        return ModelSpec(
            name=name,
            source=source,
            notes="; ".join(notes),
            extra={"hf_model_type": model_type},
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
    except (OSError, UnicodeDecodeError) as e:
        raise KvcalcError(f"{p}: cannot read: {e}") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise KvcalcError(f"{p}: not valid JSON: {e.msg} at line {e.lineno} "
                          f"column {e.colno}") from None
    except RecursionError:
        raise KvcalcError(f"{p}: not valid JSON: nested too deeply") from None
    except ValueError as e:  # json.loads' int(): more digits than Python converts
        raise KvcalcError(f"{p}: not valid JSON: {value_problem(e)}") from None
    return spec_from_hf_config(cfg, name or _default_name(p, cfg), source)
