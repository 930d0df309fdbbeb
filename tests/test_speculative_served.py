"""Speculative decoding under load (kvcalc.served.speculative, `kvcalc bench` with an
engine's speculative flag) against published measurements at several batch sizes
(tests/data/speculative/served.yaml, quoted with their source): EAGLE-3's throughput gain
on LLaMA-Instruct 3.1 8B served by SGLang on one H100 falls from 1.81x at batch 2 to about
1.38x from batch 24 on; served by vLLM on an RTX 3090, from 1.75x to 1.01x at batch 56."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yamlload

from kvcalc.errors import KvcalcError
from kvcalc.presets import load_hardware, load_model
from kvcalc.served import Load, bench
from kvcalc.serving import engine_ref
from kvcalc.serving.speculative import expected_tokens

DATA = Path(__file__).parent / "data" / "speculative"
PUBLISHED = yamlload.safe_load((DATA / "served.yaml").read_text())
SGLANG, VLLM = "eagle3-llama3.1-8b-sglang-h100", "eagle3-llama3.1-8b-vllm-rtx3090"


def _speedup(name: str, batch: int, acceptance: float) -> float:
    """kvcalc's output throughput with EAGLE-3 over without, at `batch` running requests,
    the published run's settings (the engine's own flags for the chain)."""
    d = PUBLISHED[name]
    spec, hw = load_model(d["model"]), load_hardware(d["gpu"])
    load = Load(d["input_len"], d["output_len"], d["num_prompts"], concurrency=batch,
                warmup=False)
    head = str(DATA / d["draft_config"])
    if d["engine"] == "sglang":
        flags = {"max_running_requests": batch}
        chain = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": head,
                 "speculative_num_steps": d["chain"], "speculative_eagle_topk": 1,
                 "speculative_num_draft_tokens": d["chain"] + 1}
    else:
        flags = {"max_num_seqs": batch}
        chain = {"speculative_config": json.dumps(
            {"method": "eagle3", "model": head, "num_speculative_tokens": d["chain"]})}
    ref = engine_ref(d["engine"])
    off = bench(spec, hw, load, engine=ref, tp=d["tp"], max_model_len=4096, engine_flags=flags)
    on = bench(spec, hw, load, engine=ref, tp=d["tp"], max_model_len=4096,
               engine_flags={**flags, **chain}, acceptance_rate=acceptance)
    assert on.extra["speculative"]["expected_tokens_per_step"] == pytest.approx(
        expected_tokens(acceptance, d["chain"]))
    return on.metrics["output_throughput"] / off.metrics["output_throughput"]


_SOLVED: dict = {}


def _acceptance(name: str) -> float:
    """The per-token acceptance rate whose batch-2 speedup is the published one (the
    paper gives none for these chains): kvcalc's speedup rises with it; bisection."""
    if name not in _SOLVED:
        lo, hi = 0.3, 0.95
        for _ in range(14):
            mid = (lo + hi) / 2
            if _speedup(name, 2, mid) < PUBLISHED[name]["speedups"][2]:
                lo = mid
            else:
                hi = mid
        _SOLVED[name] = (lo + hi) / 2
    return _SOLVED[name]


@pytest.mark.parametrize("name", [SGLANG, VLLM])
def test_the_solved_acceptance_is_inside_the_search(name):
    """Not pinned at a bound of the bisection: the batch-2 gain is reachable."""
    assert 0.31 < _acceptance(name) < 0.94


@pytest.mark.parametrize("batch", [4, 8, 16, 24, 32, 48, 56, 64])
def test_eagle3_gain_under_load_within_10_percent_of_sglangs(batch):
    """SGLang on one H100, chain 3: the published gains at batches 4-64, which the
    acceptance was not solved from, within 10% each."""
    assert _speedup(SGLANG, batch, _acceptance(SGLANG)) == pytest.approx(
        PUBLISHED[SGLANG]["speedups"][batch], rel=0.10)


@pytest.mark.parametrize("batch", [4, 8, 16, 24, 32, 48, 56])
def test_eagle3_gain_under_load_within_15_percent_of_vllms(batch):
    """vLLM on an RTX 3090, chain 2 (the release unstated; kvcalc's default): batches
    4-56 within 15% each."""
    assert _speedup(VLLM, batch, _acceptance(VLLM)) == pytest.approx(
        PUBLISHED[VLLM]["speedups"][batch], rel=0.15)


@pytest.mark.parametrize("name, batches", [(SGLANG, (16, 32, 64)), (VLLM, (48, 56))])
def test_the_gain_shrinks_as_the_batch_grows(name, batches):
    """Published: SGLang 1.81x at batch 2, 1.32x-1.48x from batch 16; vLLM 1.75x at
    batch 2, 1.21x and 1.01x at 48 and 56. kvcalc: each of those at least 15% under
    batch 2's gain."""
    a = _acceptance(name)
    s2 = _speedup(name, 2, a)
    assert all(_speedup(name, b, a) < 0.85 * s2 for b in batches)


def test_vllm_bench_json_names_the_round():
    spec, hw = load_model("llama3.1-8b"), load_hardware("h100-sxm")
    cfg = json.dumps({"method": "eagle3", "model": str(DATA / "eagle3-llama3.1-8b.json"),
                      "num_speculative_tokens": 3})
    r = bench(spec, hw, Load(1024, 128, 8, concurrency=4, warmup=False), max_model_len=4096,
              engine_flags={"speculative_config": cfg}, acceptance_rate=0.7)
    s = r.as_dict()["speculative"]
    assert (s["method"], s["num_speculative_tokens"], s["verified_tokens_per_request"]) == (
        "eagle3", 3, 4)
    assert s["acceptance_source"] == "given"
    assert isinstance(r.as_dict()["peak_kv_tokens"], int)  # tokens held: a whole number
    assert any("speculative decoding (eagle3" in n for n in r.notes)
    with pytest.raises(KvcalcError, match="give acceptance_rate"):  # no published rate
        bench(spec, hw, Load(1024, 128, 8, concurrency=4, warmup=False), max_model_len=4096,
              engine_flags={"speculative_config": cfg})
    with pytest.raises(KvcalcError, match="speculative flag"):
        bench(spec, hw, Load(1024, 128, 8, concurrency=4, warmup=False), max_model_len=4096,
              acceptance_rate=0.7)


def test_bench_cli_sets_each_run_beside_its_baseline():
    """`kvcalc bench --speculative-config ... --acceptance-rate`: each run's metrics with
    speculation, its baseline's TPOT and the throughput gain; a flag of another engine or
    a rate out of [0, 1] is one line, exit 2."""
    from typer.testing import CliRunner

    from kvcalc.cli import app

    cfg = json.dumps({"method": "eagle3", "model": str(DATA / "eagle3-llama3.1-8b.json"),
                      "num_speculative_tokens": 3})
    args = ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "4096",
            "--input-len", "1024", "--output-len", "128", "--concurrency", "1,64",
            "--num-prompts", "64"]
    r = CliRunner().invoke(app, [*args, "--speculative-config", cfg, "--acceptance-rate", "0.7",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    runs = json.loads(r.stdout)["runs"]
    for d in runs:
        assert d["mean_tpot_ms"] < d["without_speculation"]["mean_tpot_ms"]
        assert d["speculation_gain"] == pytest.approx(
            d["output_throughput"] / d["without_speculation"]["output_throughput"])
    assert runs[0]["speculation_gain"] > runs[1]["speculation_gain"]  # less at batch 64
    for bad in (["--acceptance-rate", "1.5", "--speculative-config", cfg],
                ["--engine", "sglang", "--speculative-config", cfg]):
        r = CliRunner().invoke(app, [*args, *bad])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1
        assert r.stderr.startswith("kvcalc: error: ")
