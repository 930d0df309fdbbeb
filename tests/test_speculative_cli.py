"""The speculative-decoding flags on the command line, in each engine's own spelling: a
flag for another engine is one line naming this engine's own, exit 2; the draft's terms in
the JSON under the names the engine's log gives them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app

DATA = Path(__file__).parent / "data"
EAGLE3 = DATA / "speculative" / "eagle3-llama3.1-8b.json"
MIMO = DATA / "speculative" / "mimo-7b-rl.json"


def _run(*args):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("engine, flag, value, theirs", [
    ("sglang", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}',
     "--speculative-algorithm"),
    ("vllm", "--speculative-algorithm", "EAGLE", "--speculative-config"),
    ("tensorrt-llm", "--speculative-algorithm", "EAGLE", "--extra-llm-api-options")])
def test_another_engines_speculative_flag_is_one_error(engine, flag, value, theirs):
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--engine", engine,
             flag, value)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvcalc: error: ") and theirs in lines[0]


def test_vllm_fit_json_names_the_draft():
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
             "--speculative-config", json.dumps({"method": "eagle3", "model": str(EAGLE3),
                                                 "num_speculative_tokens": 3}),
             "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    s = d["speculative"]
    assert (s["method"], s["num_speculative_tokens"], s["draft_layers"]) == ("eagle3", 3, 1)
    assert s["draft_kv_bytes_per_token"] == 8 * 128 * 2 * 2
    assert d["memory"]["weights"] > s["draft_weights"] > 0


def test_bad_speculative_config_is_one_line():
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--speculative-config",
             "{method: eagle3}")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "JSON" in r.stderr


def test_sglang_fit_json_has_the_draft_worker():
    r = _run("fit", "--config", str(MIMO), "--gpu", "h100-sxm", "--engine", "sglang@0.5.8",
             "--speculative-algorithm", "NEXTN", "--context-length", "32768", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"draft_weights", "draft_kv_cache"} <= set(d["memory"])
    assert d["max_running_requests"] == 48  # SGLang 0.5.8's speculative default


def test_trtllm_fit_reads_the_options_file(tmp_path):
    f = tmp_path / "extra.yaml"
    f.write_text("speculative_config:\n  decoding_type: MTP\n  num_nextn_predict_layers: 3\n")
    args = ("fit", "--config", str(DATA / "hf" / "deepseek-ai__DeepSeek-V3.json"), "--gpu",
            "h200", "--tp", "8", "--weight-dtype", "fp8", "--engine", "tensorrt-llm",
            "--max-seq-len", "8192", "--format", "json")
    base = json.loads(_run(*args).stdout)
    r = _run(*args, "--extra_llm_api_options", str(f))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["bytes_per_token"] - base["bytes_per_token"] == 576 * 2


def test_fit_times_speculative_decoding_at_batch_1():
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
             "--speculative-config", json.dumps({"method": "eagle3", "model": str(EAGLE3),
                                                 "num_speculative_tokens": 3}),
             "--acceptance-rate", "0.7", "--format", "json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["speculative_time"]
    assert t["expected_tokens_per_step"] == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert t["tpot_s"] == pytest.approx(t["round_s"] / t["expected_tokens_per_step"])
    assert t["timed_on"] == "vllm"


def test_acceptance_rate_needs_a_draft():
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--acceptance-rate", "0.7")
    assert r.exit_code == 2 and "--speculative-config" in r.stderr
    r = _run("fit", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--acceptance-rate", "1.7",
             "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}')
    assert r.exit_code == 2 and "[0, 1]" in r.stderr


def test_an_mtp_draft_is_timed_with_the_published_rate():
    r = _run("fit", "--config", str(MIMO), "--gpu", "h100-sxm", "--engine", "sglang@0.5.8",
             "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1",
             "--speculative-eagle-topk", "1", "--context-length", "32768", "--format", "json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)["speculative_time"]
    assert t["acceptance_rate"] == 0.85 and "2412.19437" in t["acceptance_source"]
