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
from kvcalc.hfconfig.fallback import has_usual_fields, uniform_decoder
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
    c = Config(cfg, model_type, where)
    if model_type in FAMILIES:
        fields = FAMILIES[model_type](c)
    elif has_usual_fields(c):  # an unknown family with the usual sizes: approximate
        fields = uniform_decoder(c)
    elif isinstance(cfg.get("text_config"), dict) and has_usual_fields(
            text := Config(cfg["text_config"], model_type, where)):
        fields = uniform_decoder(text)  # an unknown multimodal wrapper: its language model
        fields["approximate"] += ("; the language model of its text_config, the other "
                                  "towers not counted")
    else:
        remote = (" (it names remote code in 'auto_map': a model transformers itself does "
                  "not ship)" if isinstance(cfg.get("auto_map"), dict) else "")
        raise KvcalcError(
            f"{where}: model_type {model_type!r} is not one kvcalc reads{remote}; "
            f"`kvcalc presets --families` lists the {len(SUPPORTED_MODEL_TYPES)} it does"
        )
    approximate = fields.pop("approximate", "")
    notes = [f"from Hugging Face config.json, model_type {model_type}", *fields.pop("notes", [])]
    extra = {"hf_model_type": model_type, **_quantization_extra(cfg, where)}
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
