"""Prefix caching's time effect (kvcalc.serving.prefix, kvcalc.served): kvcalc's ratio
of a run with the published hit to the same run without caching, against published runs
of the same engine, model, GPU and load with and without it
(tests/data/prefix/published.yaml).

The band is the project's usual +-15% on the ratio: the ratio divides out what kvcalc's
base prediction misses of the run (engine release, host), so what is left is the prefill
the hit skips. Rows that miss are xfail (strict) with kvcalc's ratio in the reason; the
band is never widened for them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yamlload

from kvcalc.answers.bench import bench
from kvcalc.presets import load_hardware, load_model

ROWS = yamlload.safe_load((Path(__file__).parent / "data" / "prefix" / "published.yaml")
                      .read_text())
BAND = 0.15

# kvcalc's ratio where it misses the published one, and why it is believed to
MISSES: dict[tuple[str, str], str] = {
    ("vllm-blog-v1-llama3.1-8b-h100-hit75", "total_token_throughput"): (
        "kvcalc 2.354 against the published 2.889 (0.815x): with three quarters of each "
        "prompt cached the run is decode-bound at 256 requests, and kvcalc's decode step "
        "there is host-bound on vLLM's fitted host time per running request (running_s "
        "0.1 ms a request a step, presets/served/terms.yaml: 25.6 ms a step against the "
        "GPU's ~14 ms with the shared prefix read once); at 0.05 ms kvcalc's ratios are "
        "1.316, 1.832 and 3.043 (+7%, +8%, +5%): the release's host time per request is "
        "what is left, not the prefix's"),
}

# a published figure -> kvcalc's metric it is held against, and whether a bigger figure
# is faster (throughputs) or slower (times)
THROUGHPUTS = {"total_token_throughput", "output_throughput", "request_throughput"}


def _published(row: dict, metric: str) -> float:
    """The published ratio, with / without, from the row's own figures (a figure's bars:
    their heights)."""
    w, wo = row["with"], row["without"]
    if "bar_px" in w:
        return w["bar_px"] / wo["bar_px"]
    if metric == "total_token_throughput" and metric not in w:
        return ((w["input_throughput"] + w["output_throughput"])
                / (wo["input_throughput"] + wo["output_throughput"]))
    return w[metric] / wo[metric]


def _kvcalc_ratio(row: dict, metric: str) -> float:
    """kvcalc's `metric` with the row's hit (caching on) over without caching."""
    kw = dict(model=row["model"], gpu=row["gpu"], input_len=row["input_len"],
              output_len=row["output_len"], num_prompts=row["num_prompts"],
              dataset_name=row["dataset"], weight_dtype=row.get("weight_dtype"),
              random_range_ratio=row.get("random_range_ratio", 0.0),
              max_num_batched_tokens=row.get("max_num_batched_tokens"),
              max_num_seqs=row.get("max_num_seqs"))
    if row.get("concurrency"):
        kw["concurrency"] = row["concurrency"]
    elif row.get("request_rate"):
        kw["request_rate"] = row["request_rate"]
    off = bench(**kw, enable_prefix_caching=False).runs[0][metric]
    on = bench(**kw, prefix_hit=row["prefix_hit"], prefix_shared=row.get("prefix_shared", False),
               enable_prefix_caching=True).runs[0][metric]
    return on / off


def _scored():
    for name, row in ROWS.items():
        if not row["scored"]:
            continue
        for metric in row["ratio"]:
            miss = MISSES.get((name, metric))
            marks = ([pytest.mark.xfail(strict=True, raises=AssertionError, reason=miss)]
                     if miss else [])
            yield pytest.param(name, metric, marks=marks, id=f"{name}-{metric}")


@pytest.mark.parametrize("name,metric", list(_scored()))
def test_ratio_against_published(name, metric):
    row = ROWS[name]
    published = _published(row, metric)
    assert published == pytest.approx(row["ratio"][metric], abs=1e-4)  # the file's arithmetic
    got = _kvcalc_ratio(row, metric)
    assert abs(got / published - 1) <= BAND, f"kvcalc {got:.3f} against {published:.3f}"


def test_every_row_is_scored_or_says_why():
    from published import check_feature_rows

    check_feature_rows(ROWS)
    assert all(0 < row["prefix_hit"] < 1 for row in ROWS.values() if row["scored"])


def _steps():
    """vLLM's StepTimes for Llama-3.1-8B on one H100 (as tests/test_served_model.py
    builds it)."""
    from kvcalc.engines import load_engine
    from kvcalc.estimate import stored_weights, workload_for
    from kvcalc.served.step import StepTimes, served_terms
    from kvcalc.serving import engine_ref, schedule_for

    spec, ref = load_model("llama3.1-8b"), engine_ref("vllm")
    w = workload_for(spec, seq_len=8192, batch=1, tp=1, kv_dtype="bf16")
    return StepTimes(spec, load_hardware("h100-sxm"), load_engine("vllm")[0], w,
                     stored_weights(spec, w.quantization, 1), served_terms(ref.name),
                     schedule_for(ref))


def test_suffix_attention_over_a_cached_prefix_by_hand():
    """Llama-3.1-8B's 32 layers of full causal attention: 1,024 new tokens after 3,072
    cached ones attend to 3,072 + their own causal triangle, so their attention FLOPs are
    those of a 4,096-token prompt less those of a 3,072-token one, more than a 1,024-token
    prompt's own."""
    s = _steps()
    after, alone = s.chunk_attention_s(3072, 1024), s.chunk_attention_s(0, 1024)
    whole, prefix = s.chunk_attention_s(0, 4096), s.chunk_attention_s(0, 3072)
    assert after == pytest.approx(whole - prefix)
    assert after > 3 * alone  # (4096^2 - 3072^2) / 1024^2 = 7 times, less the linear parts
    assert s.prompt_s(((3072, 1024),)) > s.prompt_s(((0, 1024),))


def _served(engine="vllm", caching=True, **load):
    from kvcalc.served import Load
    from kvcalc.served import bench as served
    from kvcalc.serving import engine_ref

    base = dict(input_len=2048, output_len=128, num_prompts=64, prefix_hit=0.75)
    return served(load_model("llama3.1-8b"), load_hardware("h100-sxm"),
                  Load(**{**base, **load}), engine=engine_ref(engine), max_model_len=8192,
                  engine_flags={"enable_prefix_caching": caching}
                  if engine.startswith("vllm") else None)


def test_a_shared_prefix_is_held_once():
    """vLLM's allocate_slots allocates blocks for the tokens to compute only; a hit's
    cached blocks are appended with their ref_cnt raised: requests sharing a prefix hold
    its 1,536 tokens (0.75 of 2,048, whole blocks of 16) once, each its 512 + 128 own."""
    from kvcalc.served.step import shared_prefix

    own = _served()
    shared = _served(prefix_shared=True)
    assert shared_prefix(shared.load) == 1536 and shared_prefix(own.load) == 0
    pool = own.kv_cache_tokens
    assert own.running_limit == min(own.running_limit, pool // 2176)
    assert shared.running_limit == min(1024, (pool - 1536) // (2176 - 1536))
    assert shared.running_limit > own.running_limit
    assert shared.peak_kv_tokens <= pool - 1536
    assert any("held once" in n for n in shared.notes)


def test_without_caching_a_shared_prefix_is_nothing():
    from kvcalc.served.step import shared_prefix

    off = _served(caching=False, prefix_shared=True)
    assert not off.load.prefix_caching and shared_prefix(off.load) == 0
    assert off.running_limit == _served(caching=False).running_limit


def test_cascade_attention_reads_the_shared_prefix_once_a_decode_step():
    """vLLM's cascade_attention: the prefix's K/V once for all the step's queries, then
    each request's suffix; from 8 requests (use_cascade_attention: num_reqs < 8 returns
    False) and a prefix of 256 tokens or more."""
    from kvcalc.served.step import _bucket

    s = _steps()
    plain = s.gpu_s(256, 2100)
    s.cascade = 1536
    weights, kv, act, flops = s._decode(_bucket(256), _bucket(2100))
    kv_once = s._decode(_bucket(256), _bucket(2100 - 1536 * (1 - 1 / 256)))[1]
    assert kv_once < kv / 3  # 564 + 6 of 2,100 positions a request read
    assert s.gpu_s(256, 2100) < plain
    assert s.gpu_s(7, 2100) == pytest.approx(_steps().gpu_s(7, 2100))  # under 8: none


@pytest.mark.parametrize("engine,prefix,taken", [
    ("vllm", 0.75, True),
    ("vllm", 0.1, False),  # 192 tokens (whole blocks of 2,048 x 0.1): under 256
    ("vllm@0.7.3", 0.75, False),  # V0: no cascade attention
    ("sglang", 0.75, False),
])
def test_cascade_is_vllm_v1s_with_a_prefix_of_256_or_more(engine, prefix, taken):
    from kvcalc.served.step import cascade_setup
    from kvcalc.serving import schedule_for

    got = _served(engine, prefix_shared=True, prefix_hit=prefix, prefix_block=16)
    steps = _steps()
    steps.schedule = schedule_for(got.engine)  # the engine's own scheduler at its release
    assert bool(cascade_setup(steps, got.load)) == taken
    assert steps.cascade == (1536 if taken else 0)
    assert any("cascade" in n for n in got.notes) == taken


def test_bench_shared_prefix_flag():
    from typer.testing import CliRunner

    from kvcalc.cli import app

    r = CliRunner().invoke(app, ["bench", "--preset", "llama3.1-8b", "--gpu", "h100-sxm",
                                 "--concurrency", "8", "--num-prompts", "16",
                                 "--input-len", "2048", "--output-len", "16",
                                 "--prefix-hit", "0.5", "--shared-prefix",
                                 "--enable-prefix-caching", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "one prefix every request shares" in r.output
