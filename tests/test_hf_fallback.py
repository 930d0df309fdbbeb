"""A model_type kvcalc has no reader for (issue #20, point 4): answered as a uniform
decoder when its config has the usual fields, marked approximate in the table, the JSON
and one line on stderr; refused in one line (exit 2) when the fields are not there.

The truth for the approximate reading is transformers' own Llama (a published Llama
config, renamed to a model_type kvcalc does not know, is the model the fallback
describes) and hand arithmetic from the config.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_cache
from kvcalc.formulas.params import param_counts
from kvcalc.hfconfig import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from kvcalc.presets import presets_dir

ROOT = Path(__file__).resolve().parent.parent
# The installed presets (the wheel's in CI's Python 3.10 tier, which copies tests/ alone).
LLAMA = json.loads((presets_dir() / "hf" / "meta-llama__Llama-3.2-1B.json").read_text())


def _renamed(cfg: dict, model_type: str = "acme_lm") -> dict:
    return {**cfg, "model_type": model_type, "architectures": ["AcmeForCausalLM"]}


def _kvcalc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_unknown_family_with_the_usual_fields_is_a_uniform_decoder():
    spec = spec_from_hf_config(_renamed(LLAMA), "acme")
    assert "acme_lm" in spec.extra["approximate"]
    # Llama-3.2-1B: 16 layers x 8 K/V heads x head_dim 64 x (K and V) x 2 bytes.
    assert kv_cache(spec, 1000, 1, "bf16").bytes == 16 * 8 * 64 * 2 * 2 * 1000


def test_the_uniform_decoder_counts_a_llama_as_transformers_does():
    hf_truth = pytest.importorskip("hf_truth")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    truth = hf_truth.meta_param_count(LLAMA)["text"]
    assert param_counts(spec_from_hf_config(_renamed(LLAMA), "acme")).total == truth


def test_fields_it_cannot_read_are_named_in_the_reason():
    cfg = {"model_type": "acme_lm", "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 8, "vocab_size": 1000, "sliding_window": 512,
           "num_local_experts": 8}
    reason = spec_from_hf_config(cfg, "acme").extra["approximate"]
    for words in ("4 x hidden_size", "sliding_window",
                  "8 experts but no num_experts_per_tok"):
        assert words in reason


def test_a_known_family_is_not_approximate():
    assert "approximate" not in spec_from_hf_config(LLAMA, "llama").extra


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "num_attention_heads",
                                     "vocab_size"])
def test_without_the_usual_fields_it_is_refused_as_before(missing):
    cfg = {k: v for k, v in _renamed(LLAMA).items() if k != missing}
    with pytest.raises(KvcalcError) as e:
        spec_from_hf_config(cfg, "x", "t")
    assert str(e.value) == (
        "t: model_type 'acme_lm' is not one kvcalc reads; `kvcalc presets --families` lists "
        f"the {len(SUPPORTED_MODEL_TYPES)} it does")


def test_cli_marks_it_in_the_json_the_table_and_one_stderr_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_renamed(LLAMA)))
    r = _kvcalc("estimate", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)["model"]
    assert model["approximate"] is True and "acme_lm" in model["approximate_reason"]
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: warning: ")
    assert "approximate" in lines[0]
    table = _kvcalc("estimate", str(path))
    assert table.returncode == 0 and "approximate" in table.stdout


def test_cli_refuses_in_one_line_without_the_fields(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "acme_lm", "hidden_size": 64}))
    r = _kvcalc("estimate", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("kvcalc: error: ")
    assert "model_type 'acme_lm' is not one kvcalc reads" in r.stderr


def test_an_unknown_wrapper_is_read_from_its_text_config():
    cfg = {"model_type": "acme_vl", "text_config": _renamed(LLAMA), "vision_config": {}}
    spec = spec_from_hf_config(cfg, "acme")
    assert "text_config" in spec.extra["approximate"]
    assert kv_cache(spec, 1000, 1, "bf16").bytes == 16 * 8 * 64 * 2 * 2 * 1000
