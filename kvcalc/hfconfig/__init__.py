"""The entry points: a parsed config.json dict, or a local config.json file, to a ModelSpec.

The model_type picks the family's adapter (kvcalc.hfconfig.families); a multimodal
wrapper's language model is read the same way from its text_config. Nothing is
downloaded: a file must already be on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvcalc.errors import KvcalcError, value_problem
from kvcalc.hfconfig.config import Config, describe, json_kind
from kvcalc.hfconfig.architectures import ARCHITECTURES
from kvcalc.hfconfig.fallback import has_usual_fields, refuse_unread, uniform_decoder
from kvcalc.hfconfig.families import FAMILIES, SUPPORTED_MODEL_TYPES
from kvcalc.hfconfig.multimodal import WRAPPERS, text_config, with_towers
from kvcalc.inputfile import read_text
from kvcalc.spec import ModelSpec


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
    return next((n for n in names if isinstance(n, str) and ARCHITECTURES.get(n) in FAMILIES),
                None)


def _fields(cfg: dict, model_type: str, where: str, foreign: bool = False) -> dict:
    """ModelSpec's fields for one config dict: by its model_type's reader; else by the reader
    of the class its `architectures` names (a remote-code model_type such as Kimi K2's
    `kimi_k2`, DeepseekV3ForCausalLM); else as a uniform decoder (approximate); else, for an
    unknown wrapper, its text_config's. Whatever reads a config kvcalc has no reader for
    (`foreign`: the text_config of an unknown wrapper) must read every field that changes
    the cache or the weights (kvcalc.hfconfig.fallback.REFUSED_UNREAD), or it is refused."""
    c = Config(cfg, model_type, where)
    if model_type in FAMILIES:
        fields = FAMILIES[model_type](c)
        if foreign:
            refuse_unread(c, f"the text_config of an unknown wrapper, read as model_type "
                             f"{model_type!r},")
        return fields
    cls = _declared_class(cfg)
    if cls is not None:
        as_type = ARCHITECTURES[cls]
        read = Config(cfg, as_type, where)
        how = f"model_type {model_type!r} read as its architectures' {cls} ({as_type!r})"
        try:
            fields = FAMILIES[as_type](read)
        except KvcalcError as e:
            raise KvcalcError(f"{e} ({how})") from None
        refuse_unread(read, f"model_type {model_type!r} is not one kvcalc reads, and the reader "
                            f"of its architectures' {cls} ({as_type!r})")
        return {**fields, "read_as": as_type,
                "notes": [*fields.get("notes", []), f"{how}: a model_type without a reader "
                          "of its own, read by the class it declares"]}
    if has_usual_fields(c):  # an unknown family with the usual sizes: approximate
        refuse_unread(c, f"model_type {model_type!r} is not one kvcalc reads, and a uniform "
                         "decoder")
        return uniform_decoder(c)
    text = cfg.get("text_config")
    if isinstance(text, dict):  # an unknown multimodal wrapper: its language model
        text_type = text.get("model_type")
        if isinstance(text_type, str) and (text_type in FAMILIES or _declared_class(text)):
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
    if model_type in WRAPPERS:
        text = text_config(cfg, model_type, where)
        spec = with_towers(spec_from_hf_config(text, name, source), cfg, model_type, where)
        spec.extra.update(_quantization_extra(cfg, where))  # the wrapper holds quantization_config
        return spec
    fields = _fields(cfg, model_type, where)
    approximate = fields.pop("approximate", "")
    notes = [f"from Hugging Face config.json, model_type {model_type}", *fields.pop("notes", [])]
    extra = {"hf_model_type": model_type, **_quantization_extra(cfg, where)}
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
