"""A config.json that leaves a field out is read as transformers reads it (issue #20,
point 3): for every published config under tests/data, and for the config each model_type
kvcalc reads gets from its configuration class's own defaults, every field kvcalc reads
from it (optional or required) is dropped in turn, and the model kvcalc builds without the
field equals the one it builds with the value transformers' own configuration class fills
in for the rest of that config. The sizes that say which model it is (CORE_FIELDS) stay
required, and a field the class leaves None has no value to fill in.

The truth is transformers (`AutoConfig.for_model(model_type, **config_without_field)`),
not kvcalc's table: a family whose class has a number of its own (DeepSeek-V3's 256
routed experts, StarCoder2's 2 K/V heads) must give the same parameters, cache and
context as the config that states it.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

import hf_truth  # noqa: E402  (tests/ is on sys.path)
from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.formulas.cache import kv_cache  # noqa: E402
from kvcalc.formulas.params import param_counts  # noqa: E402
from kvcalc.hfconfig import config as config_mod  # noqa: E402
from kvcalc.hfconfig.multimodal import WRAPPERS, text_config  # noqa: E402
from kvcalc.hfconfig import spec_from_hf_config  # noqa: E402

DATA = Path(__file__).parent / "data"
# The published config.json files kvcalc keeps: the tests' and the presets' own (a copy
# of tests/ without the checkout's presets/ has the first).
PRESETS_HF = Path(__file__).resolve().parent.parent / "presets" / "hf"
CONFIGS = sorted({p.name: p for p in [*(DATA / "hf").glob("*.json"),
                                      *PRESETS_HF.glob("*.json")]}.values())


def _view(cfg: dict):
    """What the field can change: parameters, the cache at 1,000 tokens, the context."""
    try:
        spec = spec_from_hf_config(cfg, "x")
    except KvcalcError as e:
        return ("refused", str(e))
    return (param_counts(spec).total, kv_cache(spec, 1000, 1, "bf16").bytes, spec.max_context)


def _fields_read(cfg: dict, monkeypatch) -> set[str]:
    """The fields kvcalc's reader for this config asks for (each through Config.raw)."""
    read: set[str] = set()
    raw = config_mod.Config.raw

    def spy(self, key, *aliases):
        read.add(key)
        return raw(self, key, *aliases)

    with monkeypatch.context() as m:
        m.setattr(config_mod.Config, "raw", spy)
        spec_from_hf_config(cfg, "x")
    return read


def _class_default_configs() -> dict[str, dict]:
    """Each model_type's config as its configuration class builds it by default (cut to a
    few layers as tests/test_hf_truth.py cuts it)."""
    from test_hf_truth import DEFAULT_CONFIGS

    out = {}
    for model_type, overrides in sorted(DEFAULT_CONFIGS.items()):
        config = transformers.AutoConfig.for_model(model_type, **overrides)
        out[f"default:{model_type}"] = {**json.loads(json.dumps(config.to_dict(), default=str)),
                                        "model_type": model_type}  # an alias keeps its name
    return out


def _cases() -> list:
    published = [pytest.param(json.loads(p.read_text()), id=p.stem) for p in CONFIGS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defaults = [pytest.param(cfg, id=name) for name, cfg in _class_default_configs().items()]
    return published + defaults


def _as_json(value):
    """A class's value as config.json would hold it (nested configs as objects)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    return json.loads(json.dumps(value, default=str))


# Classes whose saved config.json holds another value than the attribute: Gemma 4's
# per_layer_config (a view), Dory's layer counts (DoryConfig.to_dict doubles them, as
# released checkpoints list each layer's attention and mlp blocks apart).
_SAVED_COUNTS_DIFFER = ("dory",)


@pytest.mark.parametrize("cfg", _cases())
def test_an_omitted_field_gets_the_configuration_class_value(cfg, monkeypatch):
    if cfg.get("model_type") in WRAPPERS:
        # a multimodal wrapper: its language model, with the wrapper's own defaults
        cfg = text_config(cfg, cfg["model_type"], "config.json")
    if cfg.get("model_type") is None:
        pytest.skip("a config without model_type (kvcalc refuses it, tested elsewhere)")
    # a remote-code model_type (Kimi K2's kimi_k2): the class its architectures name
    model_type = hf_truth._declared_model_type(cfg)
    logging.disable(logging.WARNING)  # transformers' notes on unused keys
    checked = 0
    optional = _fields_read(cfg, monkeypatch) - config_mod.CORE_FIELDS
    if not optional & set(cfg):
        # the config states only the sizes that say which model it is (bigscience/bloomz-560m:
        # kvcalc's BLOOM reader asks for nothing else but tie_word_embeddings, absent there)
        return
    try:
        for key in sorted(optional):
            if key not in cfg:
                continue  # read as absent already: the reader's own default
            without = {k: v for k, v in cfg.items() if k != key}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    filled = transformers.AutoConfig.for_model(
                        model_type, **{k: v for k, v in without.items() if k != "model_type"})
                except Exception:  # noqa: BLE001 (transformers' validators raise several kinds)
                    # the class cannot build this config without the field (Zamba2's
                    # default layers_block_type is for 54 layers): kvcalc refuses it too
                    assert _view(without)[0] == "refused", (model_type, key)
                    checked += 1
                    continue
            if hasattr(filled, "allow_global_per_layer_attribute_access"):
                # Gemma 4's heterogeneous config: the global value, which per_layer_config
                # overrides on some layers as the config's own fields say
                filled.allow_global_per_layer_attribute_access = True
            if not hasattr(filled, key):
                continue  # a field of kvcalc's reader the class does not have (an alias)
            saved = key == "per_layer_config" or model_type in _SAVED_COUNTS_DIFFER
            value = _as_json(filled.to_dict()[key] if saved  # as config.json holds it
                             else getattr(filled, key))
            if value is None or isinstance(value, list):
                # None: the class fills in nothing; a list: a per-layer pattern the class
                # makes up for its own default layer count, not this model's
                continue
            stated = {**cfg, key: value}
            assert _view(without) == _view(stated), (
                f"{model_type}: without {key!r} kvcalc reads another model than with "
                f"transformers' {value!r}")
            checked += 1
    finally:
        logging.disable(logging.NOTSET)
    assert checked, f"{model_type}: no field was checked"


def test_null_keeps_its_own_meaning():
    # Absent: the class's number; null: what null means (DeepSeek-V2-Lite's full-rank q,
    # a dense DeepSeek, one K/V head per query head).
    cfg = json.loads((DATA / "hf" / "deepseek-ai__DeepSeek-V3.json").read_text())
    absent = {k: v for k, v in cfg.items() if k != "q_lora_rank"}
    assert _view(absent) == _view(cfg)  # the published config states 1536, the default
    assert _view({**cfg, "q_lora_rank": None}) != _view(cfg)
    dense = _view({**cfg, "n_routed_experts": None})
    assert dense[0] < _view(cfg)[0] / 10
