"""`kvcalc plan` and `kvcalc bench` agree (issue 39): plan's times are bench's closed loop.

For a layout on plan's front, the `vllm serve` line plan prints is read back (flags, not
plan's own record), and kvcalc.served.bench is run with those settings: tp, KV cache
dtype, --max-model-len, --gpu-memory-utilization, --max-num-seqs (the concurrency) and
--max-num-batched-tokens where the line gives it, plan's prompt and output lengths,
3 x the concurrency requests and no warm-up. Plan's TTFT and TPOT are that run's mean
TTFT and mean TPOT, its tokens/s per GPU the run's output throughput x replicas / GPUs
and its tokens/s per user 1 / mean TPOT: the same function on the same inputs, so the
floats are equal, not close. The same for SGLang's and TensorRT-LLM's launch lines.

pp > 1 layouts have no served model (bench runs one pipeline stage): they are set aside
beside any served layout, and timed on the single-step model, labelled, only where no
pp = 1 layout starts.
"""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.engines import load_engine
from kvcalc.plan import plan, serve_command
from kvcalc.plan.engines import engine_plan
from kvcalc.presets import load_hardware, load_model
from kvcalc.served import Load, bench
from kvcalc.serving import engine_ref

VLLM = load_engine("vllm")[0]
# A small model on a small card, two of them: tp 1 and 2, replicas, both KV dtypes
MODEL, GPU, GPUS, LENGTH, PROMPT, OUTPUT = "qwen3-0.6b", "l4", 2, 4096, 1000, 200


def _flags(command: str) -> tuple[list[str], dict[str, str]]:
    words = shlex.split(command)
    i = next(i for i, w in enumerate(words) if w.startswith("--"))
    pairs = words[i:]
    assert len(pairs) % 2 == 0, command
    return words[:i], dict(zip(pairs[::2], pairs[1::2]))


def _bench_vllm_line(command: str, prompt: int, output: int):
    """bench() of what a `vllm serve` line runs, one replica, at its --max-num-seqs."""
    _, f = _flags(command)
    assert f["--pipeline-parallel-size"] == "1"
    seqs = int(f["--max-num-seqs"])
    given = {"gpu_memory_utilization": f["--gpu-memory-utilization"], "max_num_seqs": seqs}
    if "--max-num-batched-tokens" in f:
        given["max_num_batched_tokens"] = int(f["--max-num-batched-tokens"])
    return bench(load_model(MODEL), load_hardware(GPU),
                 Load(prompt, output, 3 * seqs, concurrency=seqs, warmup=False),
                 engine=engine_ref("vllm"), tp=int(f["--tensor-parallel-size"]),
                 kv_dtype=f.get("--kv-cache-dtype", "bf16"),  # absent: the model's, bf16
                 max_model_len=int(f["--max-model-len"]), engine_flags=given)


@pytest.fixture(scope="module")
def small_plan():
    return plan(load_model(MODEL), load_hardware(GPU), gpus=GPUS, max_model_len=LENGTH,
                prompt_len=PROMPT, output_len=OUTPUT, engine=VLLM)


def test_every_front_layout_is_benchs_run_of_its_own_line(small_plan):
    p = small_plan
    assert (p.prompt_len, p.output_len) == (PROMPT, OUTPUT)
    assert len(p.front) >= 3 and {x.tp for x in p.front} | {x.replicas for x in p.front} >= {1, 2}
    for x in p.front:
        line = p.command if x is p.best else serve_command("m", x)
        _, f = _flags(line)
        replicas = int(f.get("--data-parallel-size", "1"))
        gpus = int(f["--tensor-parallel-size"]) * replicas
        m = _bench_vllm_line(line, PROMPT, OUTPUT).metrics
        assert x.timing == "served"
        assert x.ttft_s == m["mean_ttft_ms"] / 1000, line
        assert x.tpot_s == m["mean_tpot_ms"] / 1000, line
        assert x.tokens_per_s_per_gpu == m["output_throughput"] * replicas / gpus, line
        assert x.tokens_per_s_per_user == 1 / (m["mean_tpot_ms"] / 1000), line


def test_the_cli_best_line_is_bench_of_that_line():
    r = CliRunner().invoke(app, ["plan", "--preset", MODEL, "--gpu", GPU, "--gpus", str(GPUS),
                                 "--max-model-len", str(LENGTH), "--prompt-len", str(PROMPT),
                                 "--output-len", str(OUTPUT), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    best = out["best"]
    m = _bench_vllm_line(best["command"], PROMPT, OUTPUT).metrics
    assert (best["ttft_s"], best["tpot_s"]) == (m["mean_ttft_ms"] / 1000,
                                                m["mean_tpot_ms"] / 1000)
    assert best["tokens_per_s_per_gpu"] == m["output_throughput"] * best["replicas"] / best["gpus"]
    # The JSON says which times these are: the served run's means, for every layout
    assert set(out["timing"]) == {"served"} and "mean TTFT and mean TPOT" in out["timing"]["served"]
    assert {x["timing"] for x in out["layouts"]} == {"served"}


def test_targets_are_held_against_the_served_means(small_plan):
    """A TPOT target between two front rows keeps the faster one and drops the slower."""
    fast, slow = small_plan.front[0], small_plan.front[-1]
    assert fast.tpot_s < slow.tpot_s
    target = (fast.tpot_s + slow.tpot_s) / 2
    tight = plan(load_model(MODEL), load_hardware(GPU), gpus=GPUS, max_model_len=LENGTH,
                 prompt_len=PROMPT, output_len=OUTPUT, engine=VLLM, tpot_s=target)
    assert all(x.tpot_s <= target for x in tight.front)
    assert tight.best.tokens_per_s_per_gpu < small_plan.best.tokens_per_s_per_gpu


def test_pipeline_layouts_are_not_ranked_beside_served_ones():
    """8B on 8 H100s at 32K: pp > 1 settings start, but the front is the served pp = 1
    layouts, and a note says how many were set aside and why."""
    p = plan(load_model("llama3.1-8b"), load_hardware("h100-sxm"), gpus=8,
             max_model_len=32768, engine=VLLM, concurrency=16)
    assert {(x.pp, x.timing) for x in p.front} == {(1, "served")}
    assert any("pipeline-parallel (pp > 1) layouts" in n and "no pipeline model" in n
               for n in p.notes)


def test_only_pipeline_layouts_start_they_are_timed_single_step_and_say_so():
    """Falcon-180B (232 heads, 8 K/V heads: tp at most 8) on 16 L40S at 2K: tp 8 alone
    is 360 GB / 8 = 45 GB of weights on a 48 GB card, over its budget; only pp 2 starts."""
    p = plan(load_model("falcon-180b"), load_hardware("l40s"), gpus=16, max_model_len=2048,
             engine=VLLM)
    assert {(x.pp > 1, x.timing) for x in p.front} == {(True, "single-step")}
    assert any("no pp = 1 layout" in n for n in p.notes)
    d = p.as_dict()
    assert set(d["timing"]) == {"single-step"}


def test_the_roofline_is_timed_single_step():
    p = plan(load_model(MODEL), load_hardware(GPU), gpus=1, max_model_len=LENGTH,
             prompt_len=PROMPT, output_len=OUTPUT, engine=None)
    assert {x.timing for x in p.front} == {"single-step"}
    assert any("kvcalc bench times vLLM's own terms only" in n for n in p.notes)


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm"])
def test_engine_plans_best_is_benchs_run_of_its_launch_line(engine):
    spec, hw = load_model(MODEL), load_hardware(GPU)
    p = engine_plan(spec, hw, engine_ref(engine), gpus=GPUS, max_model_len=LENGTH,
                    prompt_len=PROMPT, output_len=OUTPUT)
    b = p.best
    _, f = _flags(p.command)
    if engine == "sglang":
        tp, batch = int(f["--tp-size"]), int(f["--max-running-requests"])
        replicas = int(f.get("--dp-size", "1"))
        given = {"max_running_requests": batch}
        kv = "fp8" if f.get("--kv-cache-dtype", "auto").startswith("fp8") else "bf16"
        length = int(f["--context-length"])
    else:
        tp, batch = int(f["--tp_size"]), int(f["--max_batch_size"])
        replicas, given, kv, length = 1, {"max_batch_size": batch}, "bf16", int(f["--max_seq_len"])
    assert "--pp-size" not in f and "--pp_size" not in f
    m = bench(spec, hw, Load(PROMPT, OUTPUT, 3 * batch, concurrency=batch, warmup=False),
              engine=engine_ref(engine), tp=tp, kv_dtype=kv, max_model_len=length,
              engine_flags=given).metrics
    assert b.timing == "served"
    assert (b.ttft_s, b.tpot_s) == (m["mean_ttft_ms"] / 1000, m["mean_tpot_ms"] / 1000)
    assert b.tokens_per_s_per_gpu == m["output_throughput"] * replicas / (tp * replicas)
