"""`kvcalc plan --disaggregated` (kvcalc.plan.disagg): prefill and decode instances of their
own layouts (xPyD), each request's KV moved between them, against the co-located best.

Checked against physics that can be stated: the bytes moved are kvcalc's KV cache of the
prompt on one rank (Llama-3.1-8B: 32 layers x 8 K/V heads x 128 x 2 (K and V) x 2 bytes
= 131,072 bytes a token in bf16, half on each of two ranks, half again in fp8); the
transfer time is those bytes over the link; the rate of the pair is the smaller of what
its prefill side produces and its decode side consumes; a more prompt-heavy load wants
more prefill instances per decode instance; the targets hold.

Against published figures (tests/data/disagg): one case, Qwen3-32B on 8 H200, where a
planner (AIConfigurator) predicts 1.08x and a tuning guide reports 2.02-2.48x measured;
kvcalc is checked only to pick the same winner, land inside that span and split the GPUs
as the planner does (test_against_published_qwen3_32b_h200), not to match either.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.engines import load_engine
from kvcalc.errors import KvcalcError
from kvcalc.formulas.cache import kv_cache
from kvcalc.plan import plan
from kvcalc.plan.disagg import transfer_bytes, with_disaggregated
from kvcalc.presets import load_hardware, load_model

VLLM = load_engine("vllm")[0]
MODEL, GPU, GPUS, OUTPUT, TTFT, TPOT = "llama3.1-8b", "h100-sxm", 8, 200, 2.0, 0.03


def _disagg(prompt: int, **kw):
    p = plan(load_model(MODEL), load_hardware(GPU), gpus=GPUS, prompt_len=prompt,
             output_len=OUTPUT, ttft_s=TTFT, tpot_s=TPOT, engine=VLLM)
    return with_disaggregated(p, ttft_s=TTFT, tpot_s=TPOT, **kw)


@pytest.fixture(scope="module")
def short():
    return _disagg(500)


@pytest.fixture(scope="module")
def long():
    return _disagg(8000)


def test_transfer_bytes_are_the_prompts_kv_on_one_rank():
    spec = load_model(MODEL)
    assert transfer_bytes(spec, 1000, "bf16", 1) == 1000 * 131_072
    assert transfer_bytes(spec, 1000, "bf16", 2) == 1000 * 131_072 // 2
    assert transfer_bytes(spec, 1000, "fp8", 1) == 1000 * 65_536
    assert transfer_bytes(spec, 777, "bf16", 4) == kv_cache(
        spec, seq_len=777, batch=1, kv_dtype="bf16", tp=4).bytes_per_device


def test_record_transfer_is_bytes_over_the_link(long):
    x = long.disaggregated["xpyd"]
    t = x["transfer"]
    kv = "bf16" if x["kv_cache_dtype"] == "auto" else x["kv_cache_dtype"]
    assert t["bytes_per_request_per_rank"] == transfer_bytes(
        load_model(MODEL), 8000, kv, x["prefill"]["tp"])
    assert t["bandwidth_bytes_per_s"] == load_hardware(GPU).interconnect_bandwidth_bytes_per_s
    assert t["seconds"] == pytest.approx(t["bytes_per_request_per_rank"]
                                         / t["bandwidth_bytes_per_s"])


def test_pair_rate_is_the_smaller_side_and_targets_hold(short, long):
    for p in (short, long):
        x = p.disaggregated["xpyd"]
        pre, dec = x["prefill"], x["decode"]
        assert x["requests_per_s"] == pytest.approx(min(
            pre["instances"] * pre["prompts_per_s_at_target"],
            dec["instances"] * dec["requests_per_s"]))
        assert x["gpus"] == pre["instances"] * pre["tp"] + dec["instances"] * dec["tp"] <= GPUS
        assert x["ttft_s"] <= TTFT + 1e-9 and x["tpot_s"] <= TPOT
        assert x["tokens_per_s_per_gpu"] == pytest.approx(
            x["requests_per_s"] * OUTPUT / x["gpus"])
        assert x["name"] == f"{pre['instances']}P{dec['instances']}D"


def test_prompt_heavy_loads_want_more_prefill(short, long):
    s, g = short.disaggregated["xpyd"], long.disaggregated["xpyd"]
    assert g["prefill_per_decode"] > 4 * s["prefill_per_decode"]
    share = [x["prefill"]["instances"] * x["prefill"]["tp"] / x["gpus"] for x in (s, g)]
    assert share[1] > share[0]


def test_slower_link_costs_ttft_never_throughput(long):
    rdma = _disagg(8000, transfer_bandwidth_bytes_per_s=25e9)  # 200 Gb/s
    a, b = long.disaggregated["xpyd"], rdma.disaggregated["xpyd"]
    assert b["transfer"]["seconds"] > a["transfer"]["seconds"]
    assert b["tokens_per_s_per_gpu"] <= a["tokens_per_s_per_gpu"] * (1 + 1e-9)
    assert b["transfer"]["link"] == "--transfer-bandwidth"


def test_verdict_names_the_winner_and_ratio(short, long):
    for p in (short, long):
        d = p.disaggregated
        ratio = d["xpyd"]["tokens_per_s_per_gpu"] / d["co_located"]["tokens_per_s_per_gpu"]
        assert d["ratio"] == pytest.approx(ratio)
        assert d["winner"] == ("disaggregated" if ratio > 1 else "co-located")
        assert d["why"] in p.notes and d["why"].startswith(d["winner"])
        assert json.loads(json.dumps(p.as_dict()))["disaggregated"]["winner"] == d["winner"]


def test_one_gpu_has_no_split():
    p = plan(load_model(MODEL), load_hardware(GPU), gpus=1, prompt_len=500,
             output_len=OUTPUT, engine=VLLM)
    with pytest.raises(KvcalcError, match="gpus 2 at least"):  # the parameter: --gpus on the CLI
        with_disaggregated(p)


def test_cli_json_and_table():
    args = ["plan", "--preset", MODEL, "--gpu", GPU, "--gpus", "8", "--prompt-len", "8000",
            "--output-len", str(OUTPUT), "--ttft-ms", "2000", "--tpot-ms", "30",
            "--disaggregated"]
    r = CliRunner().invoke(app, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["disaggregated"]["xpyd"]["name"].endswith("D")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "disaggregated prefill and decode" in r.stdout
    r = CliRunner().invoke(app, args[:-1] + ["--transfer-bandwidth", "50"])
    assert r.exit_code != 0


def test_against_published_qwen3_32b_h200():
    """tests/data/disagg/qwen3-32b-h200-xpyd.yaml: AIConfigurator predicts disaggregated
    1.08x aggregated for Qwen3-32B-FP8 on 8 H200 (4,000 + 500 tokens, 60 tokens/s per
    user), with half the GPUs prefilling; Dynamo's tuning guide reports 2.02-2.48x measured.
    kvcalc plans the bf16 checkpoint on vLLM's terms at TTFT 600 ms (the gist states no
    TTFT target; 600 ms is a round one above both of AIConfigurator's chosen points), so
    only this is claimed: the same winner,
    a ratio inside the published span 1.08-2.48x (kvcalc gives 2.35x, near the guide's
    measurements, not the planner's), and the same half of the GPUs prefilling."""
    from pathlib import Path

    import yaml

    pub = yaml.safe_load((Path(__file__).parent / "data/disagg/qwen3-32b-h200-xpyd.yaml")
                         .read_text(encoding="utf-8"))
    p = plan(load_model("qwen3-32b"), load_hardware(pub["gpu"].split()[0]), gpus=pub["gpus"],
             prompt_len=pub["prompt_len"], output_len=pub["output_len"], ttft_s=0.6,
             tpot_s=pub["tpot_ms"] / 1000, engine=VLLM)
    d = with_disaggregated(p, ttft_s=0.6, tpot_s=pub["tpot_ms"] / 1000).disaggregated
    low, high = pub["aiconfigurator"]["ratio"], pub["guide_measured_ratio"][1]
    assert d["winner"] == "disaggregated"
    assert low <= d["ratio"] <= high
    x = d["xpyd"]
    share = x["prefill"]["instances"] * x["prefill"]["tp"] / x["gpus"]
    assert share == pub["aiconfigurator"]["prefill_gpu_share"]
