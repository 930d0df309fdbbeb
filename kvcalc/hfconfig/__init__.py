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
  describe the query/key heads; the cache is the Latent layer's `kv_lora_rank +
  rope_dim` (qk_rope_head_dim) per token per layer and does not use kv_heads/head_dim.
- a layer slides only when the model's attention applies its window; a flat family's
  global_every (ModelSpec.uniform) describes Gemma 2's alternation (layer i slides
  when i is even).

No torch, pandas or transformers import: this is plain dict reading.

The package, by question:
- here: the entry points, and which module reads each model_type (READER_MODULE): a
  table, so that reading one config imports its family's module alone
- config: typed access to the dict, errors that name the field, and the building blocks
  the readers share (what a reader returns, the Llama-shaped decoder)
- layer_types: which kind each layer is (`layer_types` first, then the family's
  older switch); the one reader of that field
- one module per family (llama, qwen, gemma, deepseek, mamba, ...): its readers (READERS,
  model_type -> reader) and the defaults its configuration classes fill in
  (CLASS_DEFAULTS)
- multimodal: wrappers whose language model is `text_config`
- architectures: a model_type without a reader read as the class its `architectures` names
- fallback: a model_type without a reader but with the usual sizes, read as a uniform
  decoder and marked approximate
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from kvcalc.errors import KvcalcError, value_problem
from kvcalc.hfconfig.config import Config, describe, json_kind
from kvcalc.ground.inputfile import read_text
from kvcalc.spec import ModelSpec

__all__ = ["SUPPORTED_MODEL_TYPES", "spec_from_hf_config", "spec_from_hf_config_file"]

# Which module of this package reads each model_type (its READERS, beside its
# CLASS_DEFAULTS). Written out rather than gathered from the modules, so that reading a
# config imports its family alone; tests/test_hfconfig.py holds it to the modules' own
# READERS.
_FAMILY_MODULES: dict[str, tuple[str, ...]] = {
    "aria": ("aria_text",),
    "axk": ("axk2", "axk1"),
    "bailing": ("bailing_hybrid",),
    "blt": ("blt",),
    "cohere": ("cohere", "cohere2", "cohere2_moe"),
    "dbrx": ("dbrx",),
    "deepseek": ("deepseek_v2", "deepseek_v3", "minicpm3", "deepseek_v32", "glm_moe_dsa",
                 "deepseek_v4", "sarvam_mla", "youtu"),
    "dots": ("dots1", "dots3_note_text"),
    "ernie": ("ernie4_5", "ernie4_5_moe"),
    "exaone": ("exaone4", "exaone_moe"),
    "gemma": ("gemma3_text", "recurrent_gemma", "vaultgemma", "gemma4_text", "gemma3n_text",
              "gemma4_unified_text"),
    "glm": ("glm", "glm4", "glm4_moe", "glm4_moe_lite", "sarvam_moe"),
    "gpt": ("falcon", "gpt2", "gpt_bigcode", "gpt_neox", "opt", "gpt_oss", "phi", "gptj",
            "gpt-sw3", "bloom", "gpt_neo", "mpt", "codegen", "ctrl", "xglm", "biogpt",
            "gpt_neox_japanese", "persimmon", "git"),
    "granite": ("granitemoeshared", "granite_swa", "granitemoe_swa"),
    "hunyuan": ("hunyuan_v1_dense", "hunyuan_v1_moe", "hy_v4", "hy_v4_vl_text", "hy_v3"),
    "inkling": ("inkling_text", "inkling2_text", "inkling2_loop_text"),
    "jetmoe": ("jetmoe",),
    "kimi": ("kimi_linear",),
    "kolibri": ("kolibri1",),
    "lara": ("lara_mini",),
    "liquid": ("lfm2", "lfm2_moe", "lfm3"),
    "llama": ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3",
              "llama4_text", "starcoder2", "granite", "granitemoe", "bitnet", "diffllama",
              "hyperclovax", "mellum", "emu3_text_model", "stablelm", "nemotron", "phimoe",
              "seed_oss", "smollm3", "apertus", "arcee", "helium", "ministral", "ministral3",
              "cwm", "internlm3", "iquestcoder", "exaone", "apertus1p5_text", "mllama_text_model",
              "jais2", "nanochat", "doge"),
    "longcat": ("longcat_flash",),
    "looped": ("dory", "hrm_text"),
    "mamba": ("mamba", "falcon_mamba", "jamba", "nemotron_h", "mamba2", "bamba",
              "granitemoehybrid", "falcon_h1"),
    "minimax": ("minimax", "minimax_m2", "minimax_m3_vl_text"),
    "modernbert": ("modernbert-decoder",),
    "moe_swa": ("mimo_v2_flash", "laguna", "afmoe", "beam", "flint"),
    "moshi": ("moshi",),
    "musicgen": ("musicgen_decoder", "musicgen_melody_decoder"),
    "olmo": ("olmo", "olmo2", "olmo3", "olmo_hybrid"),
    "qwen": ("qwen2_moe", "qwen3_moe", "olmoe", "flex_olmo", "qwen3_next", "qwen3_5_text",
             "qwen3_5_moe_text", "qwen4_exp_text"),
    "rwkv": ("rwkv",),
    "solar": ("solar_open",),
    "xlstm": ("xlstm",),
    "zyphra": ("zamba", "zamba2", "zaya"),
}
READER_MODULE: dict[str, str] = {t: m for m, types in _FAMILY_MODULES.items() for t in types}
# Multimodal wrappers (kvcalc.hfconfig.multimodal.WRAPPERS): their language model is read
# by its own model_type's reader.
_WRAPPER_TYPES: frozenset[str] = frozenset({
    "llava", "llava_next", "mistral3", "gemma3", "llama4", "qwen2_5_vl", "qwen2_vl", "qwen3_5",
    "qwen3_5_moe", "gemma4", "fuyu", "got_ocr2", "phi4_multimodal", "mllama", "emu3",
    "gemma4_unified", "dots3_note", "musicgen", "musicgen_melody", "moss_transcribe_diarize",
    "gemma3n", "inkling2", "inkling2_loop", "inkling_mm_model", "qwen4_exp", "hy_v4_vl",
    "deepseek_vl", "deepseek_vl_hybrid", "paligemma", "kimi_k25",
})
SUPPORTED_MODEL_TYPES: tuple[str, ...] = (*READER_MODULE, *sorted(_WRAPPER_TYPES))


def _family(model_type: str) -> ModuleType:
    """The module that reads `model_type`, imported on first use."""
    return importlib.import_module(f"{__name__}.{READER_MODULE[model_type]}")


def readers() -> dict[str, Callable[[Config], dict]]:
    """Every model_type's reader (imports every family: `kvcalc presets --families`)."""
    return {t: _family(t).READERS[t] for t in READER_MODULE}


def _read(cfg: dict, model_type: str, where: str) -> tuple[Callable[[Config], dict], Config]:
    """The reader of `model_type` and the config as its family reads it."""
    family = _family(model_type)
    return (family.READERS[model_type],
            Config(cfg, model_type, where, family.CLASS_DEFAULTS.get(model_type)))



# Config fields the engines' speculative decoding reads: MTP layers under each family's
# name, and an EAGLE / EAGLE-3 head's architecture, vocabulary and target width.
SPECULATIVE_KEYS = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers",
                    "num_mtp_modules", "draft_vocab_size", "target_hidden_size",
                    "eagle_config", "architectures")

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


def _declared_class(cfg: dict) -> str | None:
    """The first class of the config's `architectures` whose model_type kvcalc reads."""
    names = cfg.get("architectures")
    if not isinstance(names, list):
        return None
    from kvcalc.hfconfig.architectures import ARCHITECTURES

    return next((n for n in names
                 if isinstance(n, str) and ARCHITECTURES.get(n) in READER_MODULE), None)


def _fields(cfg: dict, model_type: str, where: str, foreign: bool = False) -> dict:
    """ModelSpec's fields for one config dict: by its model_type's reader; else by the reader
    of the class its `architectures` names (a remote-code model_type such as Kimi K2's
    `kimi_k2`, DeepseekV3ForCausalLM); else as a uniform decoder (approximate); else, for an
    unknown wrapper, its text_config's. Whatever reads a config kvcalc has no reader for
    (`foreign`: the text_config of an unknown wrapper) must read every field that changes
    the cache or the weights (kvcalc.hfconfig.fallback.REFUSED_UNREAD), or it is refused."""
    if model_type in READER_MODULE:
        read, c = _read(cfg, model_type, where)
        fields = read(c)
        if foreign:
            from kvcalc.hfconfig.fallback import refuse_unread

            refuse_unread(c, f"the text_config of an unknown wrapper, read as model_type "
                             f"{model_type!r},")
        return fields
    # No reader of its own: the rest is read with the fallback's checks
    from kvcalc.hfconfig.fallback import has_usual_fields, refuse_unread, uniform_decoder

    cls = _declared_class(cfg)
    if cls is not None:
        from kvcalc.hfconfig.architectures import ARCHITECTURES

        as_type = ARCHITECTURES[cls]
        reader, read = _read(cfg, as_type, where)
        how = f"model_type {model_type!r} read as its architectures' {cls} ({as_type!r})"
        try:
            fields = reader(read)
        except KvcalcError as e:
            raise KvcalcError(f"{e} ({how})") from None
        refuse_unread(read, f"model_type {model_type!r} is not one kvcalc reads, and the reader "
                            f"of its architectures' {cls} ({as_type!r})")
        return {**fields, "read_as": as_type,
                "notes": [*fields.get("notes", []), f"{how}: a model_type without a reader "
                          "of its own, read by the class it declares"]}
    if has_usual_fields(c := Config(cfg, model_type, where)):  # an unknown family with the usual sizes: approximate
        refuse_unread(c, f"model_type {model_type!r} is not one kvcalc reads, and a uniform "
                         "decoder")
        return uniform_decoder(c)
    text = cfg.get("text_config")
    if isinstance(text, dict):  # an unknown multimodal wrapper: its language model
        text_type = text.get("model_type")
        if isinstance(text_type, str) and (text_type in READER_MODULE or _declared_class(text)):
            fields = _fields(text, text_type, where, foreign=True)
            return {**fields, "notes": [*fields.get("notes", []), (
                f"{model_type}: a multimodal config kvcalc has no reader for; its language "
                f"model (text_config, model_type {text_type}) is counted, the other towers "
                "are not")]}
        if has_usual_fields(tc := Config(text, model_type, where)):
            refuse_unread(tc, f"model_type {model_type!r} is not one kvcalc reads, and a "
                              "uniform decoder of its text_config")
            fields = uniform_decoder(tc)
            fields["approximate"] += ("; the language model of its text_config, the other "
                                      "towers not counted")
            return fields
    remote = (" (it names remote code in 'auto_map': a model transformers itself does "
              "not ship)" if isinstance(cfg.get("auto_map"), dict) else "")
    raise KvcalcError(
        f"{where}: model_type {model_type!r} is not one kvcalc reads{remote}; "
        f"`kvcalc presets --families` lists the {len(SUPPORTED_MODEL_TYPES)} it does"
    )


def spec_from_hf_config(cfg: dict, name: str, source: str = "") -> ModelSpec:
    """A ModelSpec from a parsed Hugging Face config dict.

    `name` becomes the spec's name and `source` its provenance (and the prefix of
    every error message). A model_type without a reader but with the usual sizes is
    read as a uniform decoder, marked approximate (kvcalc.hfconfig.fallback). Raises
    KvcalcError for an unknown model_type without them, a missing or mistyped required
    field, or a combination the spec cannot describe.
    """
    where = source or "config.json"
    if not isinstance(cfg, dict):
        raise KvcalcError(f"{where}: expected a JSON object ({{\"model_type\": ...}}), found "
                          f"{json_kind(cfg)}")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise KvcalcError(f"{where}: missing required field 'model_type'")
    if not isinstance(model_type, str):
        raise KvcalcError(f"{where}: field 'model_type' must be a string, got "
                          f"{describe(model_type)}")
    if model_type in _WRAPPER_TYPES:
        from kvcalc.hfconfig.multimodal import text_config, with_towers

        text = text_config(cfg, model_type, where)
        spec = with_towers(spec_from_hf_config(text, name, source), cfg, model_type, where)
        spec.extra.update(_quantization_extra(cfg, where))  # the wrapper holds quantization_config
        return spec
    fields = _fields(cfg, model_type, where)
    approximate = fields.pop("approximate", "")
    notes = [f"from Hugging Face config.json, model_type {model_type}", *fields.pop("notes", [])]
    extra = {"hf_model_type": model_type, **_quantization_extra(cfg, where)}
    # What a serving engine's speculative decoding reads (kvcalc.serving.speculative): the
    # MTP layers a checkpoint carries, an EAGLE head's own vocabulary and inputs.
    drafting = {k: cfg[k] for k in SPECULATIVE_KEYS if cfg.get(k) is not None}
    if drafting:
        extra["speculative"] = drafting
    if "read_as" in fields:
        extra["read_as"] = fields.pop("read_as")
    if approximate:
        notes.append(f"approximate: {approximate}")
        extra["approximate"] = approximate
    # A family read into flat fields alone has alike layers: ModelSpec.uniform builds them.
    make = ModelSpec if "runs" in fields else ModelSpec.uniform
    try:
        return make(
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


def _hf_quant_config(p: Path, cfg: Any) -> dict | None:
    """A ModelOpt checkpoint's hf_quant_config.json beside its config.json, when the
    config holds no quantization_config (nvidia/*-NVFP4 releases written that way)."""
    if p.name != "config.json" or not isinstance(cfg, dict) or cfg.get("quantization_config"):
        return None
    side = p.with_name("hf_quant_config.json")
    if not side.is_file():
        return None
    try:
        return json.loads(read_text(side, str(side)))
    except (OSError, ValueError) as e:
        raise KvcalcError(f"{side}: not readable JSON ({e})") from None


def spec_with_hf_quant_config(spec: ModelSpec, hq: dict, where: str) -> ModelSpec:
    """`spec` with the quantization a ModelOpt hf_quant_config.json describes."""
    from kvcalc.quant.formats import quantization_from_hf_quant_config

    try:
        q = quantization_from_hf_quant_config(hq, where)
    except KvcalcError as e:
        spec.extra["quantization_error"] = str(e)
        return spec
    if q is not None:
        spec.extra["quantization"] = q
    return spec


def spec_from_hf_config_file(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a local config.json (never downloads) and map it with spec_from_hf_config;
    a ModelOpt hf_quant_config.json beside a config.json without quantization_config
    gives the weights' format."""
    p = Path(path)
    source = f"config.json ({p})"
    try:
        text = read_text(p, str(p))
    except FileNotFoundError:
        raise KvcalcError(f"{p}: no such file (kvcalc reads a local config.json; "
                          "it never downloads)") from None
    except IsADirectoryError:
        raise KvcalcError(f"{p}: is a directory; give the path of its config.json") from None
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
    spec = spec_from_hf_config(cfg, name or _default_name(p, cfg), source)
    hq = _hf_quant_config(p, cfg)
    if hq is not None:
        spec = spec_with_hf_quant_config(spec, hq, str(p.with_name("hf_quant_config.json")))
    return spec
