"""`kvcalc plan --speculative-config` (kvcalc.plan.speculation): every layout searched with
speculative decoding on and off, the winner at the user's targets in the plan's record
and launch line, and why.

Plan's figures are bench's runs, as for every plan (tests/test_plan_served.py): each
batch's on and off rows are kvcalc.served.bench of the same flags with and without the
draft, equal floats. The speculative model under load is itself checked against a
published measurement in tests/test_speculative_served.py.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.engines import load_engine
from kvcalc.errors import KvcalcError
from kvcalc.plan import plan
from kvcalc.presets import load_hardware, load_model
from kvcalc.served import Load, bench
from kvcalc.serving import engine_ref

VLLM = load_engine("vllm")[0]
MODEL, GPU, LENGTH, PROMPT, OUTPUT = "qwen3-0.6b", "l4", 4096, 1000, 200
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def _plan(acceptance: float, **kw):
    return plan(load_model(MODEL), load_hardware(GPU), gpus=1, max_model_len=LENGTH,
                prompt_len=PROMPT, output_len=OUTPUT, engine=VLLM,
                features={"speculative_config": NGRAM}, acceptance_rate=acceptance, **kw)


@pytest.fixture(scope="module")
def good():
    return _plan(0.8)


def test_a_good_draft_wins_and_its_flag_is_in_the_line(good):
    s = good.speculation
    assert s["winner"] == "on" and s["method"] == "ngram" and s["num_speculative_tokens"] == 3
    assert "--speculative-config" in good.command and "ngram" in good.command
    assert s["on"]["tokens_per_s_per_gpu"] > s["off"]["tokens_per_s_per_gpu"]
    assert good.best.tokens_per_s_per_gpu == s["on"]["tokens_per_s_per_gpu"]
    assert s["why"].startswith("speculation on") and s["why"] in good.notes
    d = good.as_dict()
    assert d["speculation"]["winner"] == "on" and "search" not in d
    assert "--speculative-config" in d["best"]["command"]


def test_each_batch_is_benchs_run_with_and_without_the_draft(good):
    s = good.speculation
    rows = s["by_batch"]
    assert [r["batch"] for r in rows][:3] == [1, 2, 4]
    x = good.best
    spec, hw = load_model(MODEL), load_hardware(GPU)
    for r in rows[:: max(1, len(rows) // 3)]:
        b = r["batch"]
        flags = {"gpu_memory_utilization": x.gpu_memory_utilization, "max_num_seqs": b}
        if x.batched_tokens_given:
            flags["max_num_batched_tokens"] = x.max_num_batched_tokens
        kv = "bf16" if x.kv_dtype == "auto" else x.kv_dtype
        load = Load(PROMPT, OUTPUT, 3 * b, concurrency=b, warmup=False)
        on = bench(spec, hw, load, engine=engine_ref("vllm"), tp=x.tp, kv_dtype=kv,
                   max_model_len=x.max_model_len, engine_flags={**flags,
                                                                "speculative_config": NGRAM},
                   acceptance_rate=0.8).metrics
        off = bench(spec, hw, load, engine=engine_ref("vllm"), tp=x.tp, kv_dtype=kv,
                    max_model_len=x.max_model_len, engine_flags=flags).metrics
        assert r["tokens_per_s_on"] == on["output_throughput"]
        assert r["tokens_per_s_off"] == off["output_throughput"]
        assert r["tpot_s_on"] == on["mean_tpot_ms"] / 1000
        assert r["tokens_per_s_gain"] == on["output_throughput"] / off["output_throughput"]
    # the gain per user shrinks as the batch grows (the verify step's work grows with it)
    assert rows[0]["tokens_per_s_per_user_gain"] > rows[-1]["tokens_per_s_per_user_gain"]


def test_a_draft_never_accepted_stops_paying_at_once_and_off_wins():
    p = _plan(0.0)
    s = p.speculation
    assert s["winner"] == "off" and "--speculative-config" not in p.command
    assert s["stops_paying_from_batch"] == 1
    assert "off from batch 1" in s["why"] and ("compute-bound" in s["why"]
                                               or "memory-bound" in s["why"])


def test_a_tpot_target_only_speculation_meets(good):
    """A TPOT target under the baseline's at batch 1: no layout without speculation meets
    it, so speculation wins alone and says so."""
    row = good.speculation["by_batch"][0]
    target = (row["tpot_s_on"] + row["tpot_s_off"]) / 2
    p = _plan(0.8, tpot_s=target)
    s = p.speculation
    assert s["winner"] == "on" and s["off"] is None
    assert "only it meets the targets" in s["why"]
    assert p.best.tpot_s <= target


def test_the_rate_and_the_timing_are_checked_first():
    spec, hw = load_model(MODEL), load_hardware(GPU)
    with pytest.raises(KvcalcError, match="give speculative_config"):  # the parameter's name
        plan(spec, hw, max_model_len=LENGTH, engine=VLLM, acceptance_rate=0.7)
    with pytest.raises(KvcalcError, match="give acceptance_rate"):  # ngram: no published rate
        plan(spec, hw, max_model_len=LENGTH, engine=VLLM, features={"speculative_config": NGRAM})
    with pytest.raises(KvcalcError, match="roofline"):
        plan(spec, hw, max_model_len=LENGTH, engine=None, features={"speculative_config": NGRAM},
             acceptance_rate=0.7)


def test_cli_json_and_errors():
    args = ["plan", "--preset", MODEL, "--gpu", GPU, "--max-model-len", str(LENGTH),
            "--prompt-len", str(PROMPT), "--output-len", str(OUTPUT)]
    r = CliRunner().invoke(app, [*args, "--speculative-config", NGRAM, "--acceptance-rate", "0.8",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["speculation"]["winner"] == "on" and "--speculative-config" in d["best"]["command"]
    r = CliRunner().invoke(app, [*args, "--speculative-config", NGRAM, "--acceptance-rate", "0.8"])
    assert r.exit_code == 0 and "on and off" in r.stdout and "tok/s x" in r.stdout
    for bad in (["--acceptance-rate", "0.8"],
                ["--speculative-config", NGRAM, "--acceptance-rate", "2"]):
        r = CliRunner().invoke(app, [*args, *bad])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith("kvcalc: error: ")


# ---- the other engines: their own speculative flags, their own launch lines --------------
EAGLE3 = "tests/data/speculative/eagle3-llama3.1-8b.json"


@pytest.fixture(scope="module")
def trtllm_options(tmp_path_factory):
    """A trtllm-serve --extra_llm_api_options file with an Eagle3 head of 3 drafts."""
    from pathlib import Path

    head = Path(__file__).parent / "data" / "speculative" / "eagle3-llama3.1-8b.json"
    f = tmp_path_factory.mktemp("trt") / "eagle3.yaml"
    f.write_text(f"speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 3\n"
                 f"  speculative_model_dir: {head}\n")
    return f


def _engine(name, features, **kw):
    from kvcalc.plan.engines import engine_plan

    return engine_plan(load_model("llama3.1-8b"), load_hardware("h100-sxm"), engine_ref(name),
                       prompt_len=128, output_len=512, features=features,
                       acceptance_rate=0.62, **kw)


def test_trtllm_speculation_stops_paying_as_the_batch_grows(trtllm_options, monkeypatch):
    """TensorRT-LLM with no host time a running request (the GPU's step decides): the
    gain falls with the batch until the verify step of 4 positions a request is
    compute-bound and the baseline wins; its launch line then has no options file. (Its
    fitted terms now carry 50 us a running request a step, which holds the baseline's
    large batches back more than speculation's, whose step emits 2.24 tokens a request:
    on then wins at every batch, test_trtllm_speculation_with_host_time_per_request.)"""
    import dataclasses

    import kvcalc.served
    import kvcalc.served.step

    fitted = kvcalc.served.step.served_terms

    def no_host_per_request(engine, host_path=""):
        return dataclasses.replace(fitted(engine, host_path), running_s=0.0)

    monkeypatch.setattr(kvcalc.served, "served_terms", no_host_per_request)
    monkeypatch.setattr(kvcalc.served.step, "served_terms", no_host_per_request)
    p = _engine("tensorrt-llm", {"extra_llm_api_options": str(trtllm_options)})
    s = p.speculation
    gains = [r["tokens_per_s_gain"] for r in s["by_batch"]]
    assert gains[0] > 1.5 and gains[-1] < 1 and s["stops_paying_from_batch"] > 1
    assert s["winner"] == "off" and "--extra_llm_api_options" not in p.command
    assert f"off from batch {s['stops_paying_from_batch']}" in s["why"]
    assert "compute-bound" in s["why"]
    assert p.as_dict()["speculation"]["winner"] == "off"


def test_trtllm_speculation_with_host_time_per_request(trtllm_options):
    """On TensorRT-LLM's fitted terms (host time per running request a step): the gain
    still falls with the batch, where the verify step turns compute-bound, but stays
    over 1, so speculation wins and the line keeps its options file."""
    p = _engine("tensorrt-llm", {"extra_llm_api_options": str(trtllm_options)})
    s = p.speculation
    gains = [r["tokens_per_s_gain"] for r in s["by_batch"]]
    assert gains[0] > 1.5 and min(gains) > 1 and gains[-1] < gains[0]
    assert s["winner"] == "on" and "--extra_llm_api_options" in p.command


def test_trtllm_speculation_wins_at_a_tight_tpot(trtllm_options):
    p = _engine("tensorrt-llm", {"extra_llm_api_options": str(trtllm_options)}, tpot_s=0.006)
    assert p.speculation["winner"] == "on" and p.best.tpot_s <= 0.006
    assert p.command.endswith(f"--extra_llm_api_options {trtllm_options}")


def test_sglang_line_carries_its_own_flags_when_on_wins():
    flags = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": EAGLE3,
             "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4}
    p = _engine("sglang", flags)
    assert p.speculation["winner"] == "on"
    assert p.command.endswith("--speculative-algorithm EAGLE3 --speculative-draft-model-path "
                              f"{EAGLE3} --speculative-num-steps 3 --speculative-eagle-topk 1 "
                              "--speculative-num-draft-tokens 4")


def test_cli_engine_flags_are_each_engines_own():
    args = ["plan", "--preset", MODEL, "--gpu", GPU, "--max-model-len", str(LENGTH),
            "--acceptance-rate", "0.8"]
    for bad, says in ((["--engine", "sglang", "--speculative-config", NGRAM],
                       "--speculative-algorithm"),
                      (["--engine", "any", "--speculative-config", NGRAM], "one --engine")):
        r = CliRunner().invoke(app, [*args, *bad])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.output
    r = CliRunner().invoke(app, [*args, "--engine", "sglang", "--speculative-algorithm", "NGRAM",
                                 "--speculative-num-steps", "3", "--format", "json"])
    assert r.exit_code == 0, r.output
    e = json.loads(r.stdout)["engines"][0]
    assert e["speculation"]["method"] == "ngram" and e["speculation"]["winner"] in ("on", "off")
