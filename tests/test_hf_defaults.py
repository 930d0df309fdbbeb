"""A config.json that leaves a field out is read as transformers reads it (issue #20,
point 3): for every published config under tests/data and every optional field kvcalc
reads from it, the model kvcalc builds without the field equals the one it builds with
the value transformers' own configuration class fills in for the rest of that config.

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

from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.formulas.cache import kv_cache  # noqa: E402
from kvcalc.formulas.params import param_counts  # noqa: E402
from kvcalc.hfconfig import config as config_mod  # noqa: E402
from kvcalc.hfconfig.read import spec_from_hf_config  # noqa: E402

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


def _optional_fields(cfg: dict, monkeypatch) -> set[str]:
    """The fields kvcalc's reader for this config asks for as optional."""
    read: set[str] = set()
    opt_int, opt_bool = config_mod.Config.opt_int, config_mod.Config.opt_bool

    def spy_int(self, key, default, *aliases):
        read.add(key)
        return opt_int(self, key, default, *aliases)

    def spy_bool(self, key, default):
        read.add(key)
        return opt_bool(self, key, default)

    with monkeypatch.context() as m:
        m.setattr(config_mod.Config, "opt_int", spy_int)
        m.setattr(config_mod.Config, "opt_bool", spy_bool)
        spec_from_hf_config(cfg, "x")
    return read


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_an_omitted_field_gets_the_configuration_class_value(path, monkeypatch):
    cfg = json.loads(path.read_text())
    model_type = cfg.get("model_type")
    if model_type is None:
        pytest.skip("a config without model_type (kvcalc refuses it, tested elsewhere)")
    logging.disable(logging.WARNING)  # transformers' notes on unused keys
    checked = 0
    try:
        for key in sorted(_optional_fields(cfg, monkeypatch)):
            without = {k: v for k, v in cfg.items() if k != key}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                filled = transformers.AutoConfig.for_model(
                    model_type, **{k: v for k, v in without.items() if k != "model_type"})
            if not hasattr(filled, key):
                continue  # a field of kvcalc's reader the class does not have (an alias)
            stated = {**cfg, key: getattr(filled, key)}
            assert _view(without) == _view(stated), (
                f"{path.name}: without {key!r} kvcalc reads another model than with "
                f"transformers' {getattr(filled, key)!r}")
            checked += 1
    finally:
        logging.disable(logging.NOTSET)
    assert checked, f"{path.name}: no optional field was checked"


def test_null_keeps_its_own_meaning():
    # Absent: the class's number; null: what null means (DeepSeek-V2-Lite's full-rank q,
    # a dense DeepSeek, one K/V head per query head).
    cfg = json.loads((DATA / "hf" / "deepseek-ai__DeepSeek-V3.json").read_text())
    absent = {k: v for k, v in cfg.items() if k != "q_lora_rank"}
    assert _view(absent) == _view(cfg)  # the published config states 1536, the default
    assert _view({**cfg, "q_lora_rank": None}) != _view(cfg)
    dense = _view({**cfg, "n_routed_experts": None})
    assert dense[0] < _view(cfg)[0] / 10
